"""Ray's ``ray start`` command, without the Ray Client server nobody asked for.

``ray start --head`` starts a Ray Client server (port 10001 unless ``--ray-client-server-port``
says otherwise) whenever ``grpc`` can be imported, which it always can beside Flower, and has no
option to leave it out. That server takes a Ray program from whoever reaches its port and runs
it in the cluster, with no credentials asked. Run as ``python -m fl_async.app.ray_start start
...``, this is Ray's own command line with one change: without ``--ray-client-server-port``
among the arguments, no Ray Client server starts (as when Ray is installed without ``grpc``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

CLIENT_PORT_OPTION = "--ray-client-server-port"
"""The option of ``ray start`` that asks for a Ray Client server (and names its port)."""


def asks_for_client_server(argv: Sequence[str]) -> bool:
    """Whether the arguments ``argv`` of ``ray start`` ask for a Ray Client server."""
    return any(
        arg == CLIENT_PORT_OPTION or arg.startswith(CLIENT_PORT_OPTION + "=") for arg in argv
    )


def main() -> None:
    """Ray's command line, the Ray Client server left out unless the arguments ask for one."""
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
