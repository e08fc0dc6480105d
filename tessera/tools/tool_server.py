"""A fork server that runs ``tessera-opt``, ``filecheck`` and Python scripts for lit.

Each RUN line of the lit suite used to start a fresh Python that imported
Tessera and xDSL (about a second) to do a few milliseconds of work. The server
imports everything once and forks a child per command: the child takes over
the client's working directory, environment, argv and standard streams (passed
as file descriptors over a Unix socket), runs the tool's ``main`` and reports
its exit status. Every command starts from the same freshly imported state, as
a new process would; nothing of one command's work reaches another.

The client, :mod:`tessera.tools.tool_client`, is a stdlib-only script that lit
runs in place of each tool. The server exits when the process that started it
(lit) exits, or on SIGTERM.

Protocol, per connection: the client sends a 4-byte big-endian length and a
JSON object ``{"tool", "argv", "cwd", "env"}`` with its fds 0, 1 and 2 attached
(SCM_RIGHTS); the server answers with the 4-byte exit status.
"""

from __future__ import annotations

import io
import json
import os
import runpy
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Callable

TOOLS = ("tessera-opt", "filecheck", "python")


def _preload() -> None:
    """Import what the tools use, so that the forked children need not."""
    import filecheck.main  # noqa: F401

    import tessera  # noqa: F401
    from tessera.passes import ALL_PASSES
    from tessera.tools import opt  # noqa: F401
    from tessera.universe import ALL_DIALECTS, ALL_TARGETS

    for factory in [*ALL_PASSES.values(), *ALL_DIALECTS.values(), *ALL_TARGETS.values()]:
        factory()


def _tool_main(tool: str, argv: list[str]) -> Callable[[], int | None]:
    if tool == "tessera-opt":
        from tessera.tools.opt import main

        sys.argv = ["tessera-opt", *argv]
        return lambda: main(argv)
    if tool == "filecheck":
        from filecheck.main import main as filecheck_main

        sys.argv = ["filecheck", *argv]
        return filecheck_main
    if tool == "python":
        if not argv:
            raise ValueError("python: a script path is needed")
        sys.argv = list(argv)

        def run_script() -> None:
            runpy.run_path(argv[0], run_name="__main__")

        return run_script
    raise ValueError(f"unknown tool '{tool}' (known: {', '.join(TOOLS)})")


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _fresh_std_streams() -> None:
    """New ``sys.stdin/stdout/stderr`` over the client's descriptors 0-2. The server's own
    stream objects cached facts about the files the server started with (a log file is
    seekable, a pipe is not), which ``TextIOWrapper.reconfigure`` and ``tell`` rely on."""
    line = {"stdin": False, "stdout": False, "stderr": True}
    for fd, name, mode in ((0, "stdin", "rb"), (1, "stdout", "wb"), (2, "stderr", "wb")):
        raw = io.FileIO(fd, mode[0], closefd=False)
        buffered = io.BufferedReader(raw) if mode == "rb" else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(buffered, encoding="utf-8", errors="surrogateescape" if
                                  fd == 0 else "backslashreplace", line_buffering=line[name])
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run_child(request: dict, fds: list[int]) -> int:
    """In the forked child: become the client's command and run it; its exit status."""
    from tessera.options import adopt_environment  # preloaded: no import cost here

    os.chdir(request["cwd"])
    adopt_environment(request["env"])
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    _fresh_std_streams()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status = _exit_status(_tool_main(request["tool"], request["argv"])())
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        pass
    return status


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(data) < 4:
        raise ConnectionError("short request")
    (length,) = struct.unpack(">I", data[:4])
    body = data[4:]
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            raise ConnectionError("truncated request")
        body += chunk
    return json.loads(body), list(fds)


def serve(path: str, parent: int) -> None:
    """Accept commands on the Unix socket ``path`` until process ``parent`` is gone."""
    _preload()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    server.bind(tmp)
    server.listen(64)
    os.rename(tmp, path)  # the socket appears only once it accepts
    server.settimeout(1.0)
    try:
        while os.getppid() == parent:
            _reap()
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            try:
                request, fds = _receive(conn)
            except (OSError, ValueError, ConnectionError):
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                server.close()
                status = 1
                try:
                    status = _run_child(request, fds)
                finally:
                    try:
                        conn.sendall(struct.pack(">i", status))
                    finally:
                        os._exit(0)
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        server.close()
        try:
            os.unlink(path)
        except OSError:
            pass
        _reap(block=True)


def _reap(block: bool = False) -> None:
    """Wait for finished children (so that their CPU time counts as this process's)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tessera.tools.tool_server SOCKET_PATH PARENT_PID")
    serve(sys.argv[1], int(sys.argv[2]))


if __name__ == "__main__":
    main()
