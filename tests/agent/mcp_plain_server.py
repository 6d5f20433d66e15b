"""A dependency-free stdio MCP server (plain Python, JSON-RPC 2.0 lines) for the sandbox tests.

The sandbox image has python3 but not the mcp package, so this speaks the protocol by hand:
initialize, tools/list, tools/call, ping. Options (argv):
  --ignore-eof     keep running after stdin closes (so only a kill ends it)
  --spawn-child    start a child in its own session that sleeps (it must be killed too)
  --crash-at-start write to stderr and exit 3 before reading anything
"""

import json
import os
import socket
import subprocess
import sys
import time

TOOLS = [
    {"name": "whoami", "description": "Where the server runs: hostname, uname, pid, an env variable.",
     "inputSchema": {"type": "object", "properties": {}}, "annotations": {"readOnlyHint": True}},
    {"name": "read_file", "description": "The text of a file.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "add", "description": "Add two integers.",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                     "required": ["a", "b"]}},
    {"name": "crash", "description": "Exit in the middle of the call.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "sleep", "description": "Answer after some seconds.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}},
]


def call_tool(name, args):
    if name == "whoami":
        info = {"hostname": socket.gethostname(), "nodename": os.uname().nodename, "pid": os.getpid(),
                "cwd": os.getcwd(), "greeting": os.environ.get("GREETING")}
        return json.dumps(info), False
    if name == "read_file":
        try:
            with open(args["path"], encoding="utf-8") as f:
                return f.read(), False
        except OSError as exc:
            return f"cannot read {args['path']}: {exc}", True
    if name == "add":
        return str(args["a"] + args["b"]), False
    if name == "crash":
        sys.stderr.write("crashing on purpose in the middle of a call\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "sleep":
        time.sleep(args["seconds"])
        return "slept", False
    return f"unknown tool {name}", True


def answer(request):
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": "plain", "version": "1"}}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        text, is_error = call_tool(params["name"], params.get("arguments") or {})
        return {"content": [{"type": "text", "text": text}], "isError": is_error}
    if method == "ping":
        return {}
    raise LookupError(method)


def main():
    if "--crash-at-start" in sys.argv:
        sys.stderr.write("plain server: cannot open its configuration\n")
        sys.exit(3)
    if "--spawn-child" in sys.argv:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification (notifications/initialized)
        reply = {"jsonrpc": "2.0", "id": request["id"]}
        try:
            reply["result"] = answer(request)
        except LookupError as exc:
            reply["error"] = {"code": -32601, "message": f"method not found: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    if "--ignore-eof" in sys.argv:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
