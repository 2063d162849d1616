"""`cemctl serve`: a live, read-only results dashboard in the browser (`cemctl.serve`).

Opens the results database read-only (SQLite `mode=ro`, PostgreSQL read-only transactions),
binds 127.0.0.1 unless `--host` says otherwise (then a warning line), prints the URL and
serves until Ctrl-C. Nothing here imports the server until the command runs.
"""

from __future__ import annotations

from typing import Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, fail, runs_dir


def serve_command(
    port: int = typer.Option(8765, "--port", "-p", min=0, max=65535, help="Port to listen on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind. Anything but a loopback address lets "
                             "other machines read your results (a warning is printed)."),
    reports: Optional[str] = typer.Option(None, "--reports-dir", help="Folder of `cemctl report` outputs the pages "
                                          "link to [default: ./reports]."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Serve a live, read-only dashboard of the results in the browser (Ctrl-C to stop)."""
    import sys

    with cli_errors():
        from cemctl.serve import start
        from cemctl.serve.server import is_loopback

        try:
            server = start(db_url(db), runs_dir(runs), host=host, port=port, reports_dir=reports)
        except OSError as e:
            if e.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
                fail(f"--port: port {port} on {host} is in use; give another (--port 0 picks a free one)")
            fail(f"--host/--port: cannot listen on {host}:{port}: {e.strerror or e}")
    if not is_loopback(host):
        print(f"warning: listening on {host}: anyone who can reach this machine on port "
              f"{server.server_address[1]} can read these results (read-only)", file=sys.stderr, flush=True)
    print(f"cemctl serve: {server.url} (read-only; Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print("stopped", flush=True)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)
