"""An interactive setup wizard: it insists on a terminal, so piping answers in does not work."""

import sys

if not (sys.stdin.isatty() and sys.stdout.isatty()):
    sys.exit("wizard: needs an interactive terminal")
name = input("Service name: ").strip()
port = input("Port: ").strip()
if input(f"Write service {name!r} on port {port}? [y/N] ").strip().lower() != "y":
    sys.exit("aborted")
with open("/app/service.ini", "w") as f:
    f.write(f"[service]\nname = {name}\nport = {port}\nconfigured_by = wizard\n")
print("done")
