"""Run a tool through :mod:`tessera.tools.tool_server`: ``python -S tool_client.py TOOL ARGS...``.

It is run as a script (not ``-m``), so that it imports only the standard library
and starts in a few milliseconds. It passes its argv, working directory,
environment and standard streams to the server named by ``TESSERA_TOOL_SERVER``
and exits with the command's status. Without a server it runs the tool itself
in a new Python.

This script is the one reader of the environment outside :mod:`tessera.options`: it
must start without importing Tessera (that import is what the server saves), so it
reads ``TESSERA_TOOL_SERVER`` and ``TESSERA_TOOL_PYTHON`` itself and passes its whole
environment on (the server's child adopts it with
:func:`tessera.options.adopt_environment`).
"""

import json
import os
import socket
import struct
import sys
import time

_MODULES = {"tessera-opt": ["-m", "tessera.tools.opt"], "filecheck": ["-m", "filecheck"],
            "python": []}


def _fallback(tool, argv):
    python = os.environ.get("TESSERA_TOOL_PYTHON", sys.executable)
    os.execv(python, [python, *_MODULES[tool], *argv])


def _connect(path, wait):
    deadline = time.monotonic() + wait
    while True:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in _MODULES:
        sys.exit(f"usage: tool_client.py {{{','.join(_MODULES)}}} ARGS...")
    tool, argv = sys.argv[1], sys.argv[2:]
    path = os.environ.get("TESSERA_TOOL_SERVER")
    conn = _connect(path, 120.0) if path else None
    if conn is None:
        _fallback(tool, argv)
    body = json.dumps(
        {"tool": tool, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    ).encode()
    socket.send_fds(conn, [struct.pack(">I", len(body)) + body], [0, 1, 2])
    reply = b""
    while len(reply) < 4:
        chunk = conn.recv(4 - len(reply))
        if not chunk:
            sys.stderr.write(f"{tool}: the tool server's child died\n")
            sys.exit(70)
        reply += chunk
    sys.exit(struct.unpack(">i", reply)[0])


if __name__ == "__main__":
    main()
