"""The bash side of the persistent shell, and how commands are framed on the wire.

One long-lived `bash` per sandbox reads command lines on stdin. Each command is evaluated in the
shell itself (so cd, exports and functions persist) with stdout+stderr spooled to a file inside
the container; afterwards only the head and tail of that file travel back, framed as

    \\x1eHZ:<token>:<exit code>:<total bytes>:<oom kills>\\n <head bytes> <tail bytes> \\x1eHZEND:<token>\\n

Spooling inside the container keeps host memory flat however much a command prints, and lets
background jobs keep writing after the command returns. The token is random per command and
never stored in a shell variable, so no output can forge the end marker.

Before evaluating a command the shell prints \x1eHZSTART:<token>\n: an interrupt is only reaped
after that line, so the reaper never works from the previous command's start time.

Every process a command starts inherits __HZ_CMD=<token>; a second long-lived bash (the reaper)
kills exactly those on timeout, using only builtins so it works even when a fork bomb has used
up the pids limit. SIGUSR1 makes the shell return from the command's evaluation, which also
stops shell loops that spawn nothing.
"""

from __future__ import annotations

SPOOL_DIR = "/tmp/.horizon"

# Commands may define functions named like any command (a fork bomb redefines `:`), so the code
# that runs around them calls `builtin` and `command` explicitly and never calls `:`.
SHELL_PRELUDE = r"""
set +o history +m
mkdir -p "$__hz_dir" 2>/dev/null; chmod 700 "$__hz_dir" 2>/dev/null
exec {__hz_pause_fd}<> <(:)  # read -t on it sleeps without forking
__hz_oom_kills() {  # sets __hz_oomn (no subshell: this runs around every command)
  local line n=0
  if [[ -r /sys/fs/cgroup/memory/memory.oom_control ]]; then
    while read -r line; do [[ $line == oom_kill\ * ]] && n=${line#oom_kill }; done < /sys/fs/cgroup/memory/memory.oom_control
  elif [[ -r /sys/fs/cgroup/memory.events ]]; then
    while read -r line; do [[ $line == oom_kill\ * ]] && n=${line#oom_kill }; done < /sys/fs/cgroup/memory.events
  fi
  __hz_oomn=$n
}
__hz_now() { local up; read -r up _ < /proc/uptime; __hz_cs=$(( 10#${up/./} )); }  # centiseconds = ticks
__hz_mark_start() {
  # The reaper treats the shell's descendants started at or after this tick as the command's.
  # When the previous command ended in this same tick and left background jobs, one of them may
  # have forked in it too: wait for the next tick (at most 10 ms, only then), so neither is taken
  # for the other. Without live jobs, start at once.
  __hz_now
  if (( __hz_cs <= __hz_end_cs )); then
    builtin jobs -p > "$__hz_dir/jobs" 2>/dev/null
    if [[ -s $__hz_dir/jobs ]]; then
      while (( __hz_cs <= __hz_end_cs )); do builtin read -r -t 0.002 -u "$__hz_pause_fd"; __hz_now; done
    fi
  fi
  builtin printf '%s\n' "$__hz_cs" > "$__hz_dir/start"
}
__hz_end_cs=0
__hz_run() {
  trap 'return 124' USR1
  export __HZ_CMD=$__hz_tok
  __hz_mark_start
  __hz_oom_kills; __hz_oom0=$__hz_oomn
  # From here on the reaper sees this command's start, and USR1's `return` leaves __hz_run (in a
  # function called from here it would only leave that function).
  builtin printf '\036HZSTART:%s\n' "$__hz_tok"
  eval "$__hz_cmd" > "$__hz_spool" 2>&1 < "$__hz_in"
}
__hz_done() {
  local rc=$1 oom
  trap '__hz_usr1=1' USR1
  export __HZ_CMD=
  __hz_now; __hz_end_cs=$__hz_cs
  __hz_oom_kills; oom=$((__hz_oomn - __hz_oom0))
  if [[ -s $__hz_spool ]]; then
    # One process reads the size, head and tail, and removes the spool (perl-base is Essential on
    # Debian); images without perl (Alpine, busybox) get the same frame from POSIX tools.
    if [[ -n $__hz_perl ]]; then
      command perl -e "$__hz_emit" -- "$__hz_spool" "$__hz_head" "$__hz_tail" "$2" "$rc" "$oom" \
        || builtin printf '\036HZ:%s:%s:0:%s\n' "$2" "$rc" "$oom"
    else
      __hz_emit_posix "$2" "$rc" "$oom"
    fi
  else
    # No output: no process at all; empty spools are removed in batches.
    builtin printf '\036HZ:%s:%s:0:%s\n' "$2" "$rc" "$oom"
    __hz_trash+=("$__hz_spool")
    (( ${#__hz_trash[@]} >= 64 )) && { command rm -f -- "${__hz_trash[@]}"; __hz_trash=(); }
  fi
  [[ $__hz_in == "$__hz_dir"/in-* ]] && command rm -f -- "$__hz_in"
  builtin printf '\036HZEND:%s\n' "$2"
}
__hz_trash=()
__hz_emit_posix() {  # $1 token, $2 exit code, $3 oom kills: head and tail with wc/head/tail only
  local size
  size=$(command wc -c < "$__hz_spool" 2>/dev/null); size=${size//[!0-9]/}; size=${size:-0}
  builtin printf '\036HZ:%s:%s:%s:%s\n' "$1" "$2" "$size" "$3"
  if (( size <= __hz_head + __hz_tail )); then
    command head -c "$size" -- "$__hz_spool"
  else
    command head -c "$__hz_head" -- "$__hz_spool"; command tail -c "$__hz_tail" -- "$__hz_spool"
  fi
  command rm -f -- "$__hz_spool"
}
__hz_perl=; command -v perl >/dev/null 2>&1 && __hz_perl=1
__hz_emit='
  my ($path, $head, $tail, $tok, $rc, $oom) = @ARGV;
  open(my $fh, "<:raw", $path) or die;
  my $size = -s $fh;
  binmode STDOUT;
  print "\036HZ:$tok:$rc:$size:$oom\n";
  my $buf;
  if ($size <= $head + $tail) { read($fh, $buf, $size); print $buf; }
  else {
    read($fh, $buf, $head); print $buf;
    seek($fh, $size - $tail, 0); read($fh, $buf, $tail); print $buf;
  }
  unlink $path;
'
trap '__hz_usr1=1' USR1
printf '\036HZREADY:%s:%s:%s\n' "$$" "$(id -u)" "$(id -g)"
"""

REAPER_PRELUDE = r"""
set +o history +m
__hz_reap() {
  # $1: the command's token, $2: the shell's pid, $3: 1 to take init's orphans too (containers).
  # Builtins only: forking may be impossible here.
  # A process belongs to the command if it carries the command's __HZ_CMD (exec'd programs), or
  # if it started after the command did and its ancestry, through processes that also started
  # after it, leads to the shell (forked subshells keep the shell's environment block; setsid and
  # env -i escape the process group and the marker, not the ancestry). A new child of an older
  # process is not the command's: a background job of an earlier command keeps forking in the
  # shell's process group, and `docker exec` processes (file transfers, diffs, MCP servers; their
  # parent is 0) fork while a command runs. Chains that end at init (a daemonising double fork,
  # or children of a process killed in an earlier round) count when the process is in the
  # shell's process group, and in a container ($3 = 1), where init and every process are the
  # sandbox's, always; on a host init also adopts other people's daemons.
  local round quiet=0 p e line start=0 shell_pgid=-1 q depth ours
  local -a env f g found
  kill -USR1 "$2" 2>/dev/null
  read -r start < "$__hz_dir/start"
  if read -r line < "/proc/$2/stat"; then f=(${line##*) }); shell_pgid=${f[2]}; fi
  # A process caught mid-fork can still produce a child after it was seen, so stop only after a
  # few consecutive rounds find nothing.
  for ((round = 0; round < 400 && quiet < 3; round++)); do
    found=()
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      [[ $p == "$$" || $p == "$2" || $p == 1 ]] && continue
      read -r line 2>/dev/null < "/proc/$p/stat" || continue
      f=(${line##*) })
      [[ ${f[0]} == Z ]] && continue  # already dead, waiting to be reaped
      if (( f[19] >= start )); then
        q=${f[1]} ours=0
        for ((depth = 0; depth < 64; depth++)); do
          if (( q == $2 )); then ours=1; break; fi
          if (( q <= 1 )); then (( q == 1 && ($3 == 1 || f[2] == shell_pgid) )) && ours=1; break; fi
          read -r line 2>/dev/null < "/proc/$q/stat" || break
          g=(${line##*) })
          (( g[19] >= start )) || break  # an older ancestor: not this command's
          q=${g[1]}
        done
        if (( ours )); then kill -STOP "$p" 2>/dev/null; found+=("$p"); continue; fi
      fi
      mapfile -d '' env 2>/dev/null < "/proc/$p/environ" || continue
      for e in "${env[@]}"; do
        if [[ $e == "__HZ_CMD=$1" ]]; then kill -STOP "$p" 2>/dev/null; found+=("$p"); break; fi
      done
    done
    if (( ${#found[@]} == 0 )); then
      (( quiet++ ))
      read -r -t 0.02 -u "$__hz_pause_fd"  # a sleep without forking: nothing is ever written there
    else
      quiet=0
      kill -KILL "${found[@]}" 2>/dev/null
    fi
  done
  kill -USR1 "$2" 2>/dev/null
}
exec {__hz_pause_fd}<> <(:)
printf '\036HZREADY:%s:0:0\n' "$$"
"""


def bash_quote(text: str) -> str:
    """Quote `text` as a bash $'...' word on one line (newlines and control bytes escaped)."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        if byte in (0x27, 0x5C):  # ' and \
            out.append(f"\\{chr(byte)}")
        elif byte < 0x20 or byte == 0x7F:
            out.append(f"\\x{byte:02x}")
        else:
            out.append(chr(byte) if byte < 0x80 else f"\\x{byte:02x}")
    return "$'" + "".join(out) + "'"


# bash reads a pipe one byte at a time, so long commands travel as a file instead.
INLINE_COMMAND_LIMIT = 8192


def command_file(token: str, spool_dir: str = SPOOL_DIR) -> str:
    return f"{spool_dir}/cmd-{token}"


def command_line(token: str, command: str | None, stdin_path: str, head: int, tail: int,
                 spool_dir: str = SPOOL_DIR) -> bytes:
    """The line the shell reads for one command; $? after __hz_run is the command's status.

    `command` None means the command text was written to command_file(token) beforehand.
    """
    spool = bash_quote(f"{spool_dir}/out-{token}")
    if command is None:
        path = bash_quote(command_file(token, spool_dir))
        load = f"IFS= builtin read -r -d '' __hz_cmd < {path}; command rm -f -- {path}"
    else:
        load = f"__hz_cmd={bash_quote(command)}"
    return (
        f"__hz_tok={token}; __hz_spool={spool}; __hz_in={bash_quote(stdin_path)}; "
        f"__hz_head={head}; __hz_tail={tail}; {load}; "
        f"__hz_run; __hz_done $? {token}\n"
    ).encode()


def reap_line(token: str, shell_pid: int, adopt_orphans: bool = False) -> bytes:
    return f"__hz_reap {token} {shell_pid} {int(adopt_orphans)}; printf '\\036HZREAPED:%s\\n' {token}\n".encode()
