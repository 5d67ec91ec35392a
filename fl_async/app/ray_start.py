"""Ray's ``ray start`` command, without the Ray Client server nobody asked for.

``ray start --head`` starts a Ray Client server (port 10001 unless ``--ray-client-server-port``
says otherwise) whenever ``grpc`` can be imported, which it always can beside Flower, and has no
option to leave it out. That server takes a Ray program from whoever reaches its port and runs
it in the cluster, with no credentials asked. Run as ``python -m fl_async.app.ray_start start
...``, this is Ray's own command line with two changes: without ``--ray-client-server-port``
among the arguments, no Ray Client server starts (as when Ray is installed without ``grpc``);
and the command groups ``ray start`` does not use (``LEFT_OUT``) are not loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

CLIENT_PORT_OPTION = "--ray-client-server-port"
"""The option of ``ray start`` that asks for a Ray Client server (and names its port)."""
LEFT_OUT = ("ray.serve.scripts", "ray.dashboard.modules.job.cli", "ray.util.state.state_cli")
"""Ray's other command groups (Serve, jobs, state), which ``ray start`` does not use. Ray's
command line adds each only if it imports, as it may not where Ray is installed without them;
left out, the command loads in 0.6 CPU-seconds rather than 2.1 (Serve's alone imports pandas and
FastAPI), once for every run with a Ray of its own."""


def asks_for_client_server(argv: Sequence[str]) -> bool:
    """Whether the arguments ``argv`` of ``ray start`` ask for a Ray Client server."""
    return any(
        arg == CLIENT_PORT_OPTION or arg.startswith(CLIENT_PORT_OPTION + "=") for arg in argv
    )


def main() -> None:
    """Ray's command line without its ``LEFT_OUT`` groups, the Ray Client server left out
    unless the arguments ask for one."""
    if "ray.scripts.scripts" not in sys.modules:  # loaded already (a test): leave it as it is
        for name in LEFT_OUT:
            sys.modules.setdefault(name, None)  # None: `import name` raises ImportError
    from ray.scripts import scripts  # Ray's import costs a second: not for asks_for_client_server

    if not asks_for_client_server(sys.argv[1:]):
        # `ray start` starts the server only when this finds Ray Client's dependency; the
        # port's own check (in RayParams) runs only when a port is given, and is not changed.
        scripts.get_ray_client_dependency_error = lambda: ImportError(
            f"the Ray Client server is left out (no {CLIENT_PORT_OPTION})"
        )
    scripts.main()


if __name__ == "__main__":
    main()
