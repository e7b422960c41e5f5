"""The remote runner (``nki_agent.runner``): an HTTP service that verifies and times kernels for many clients.

``app.py`` (FastAPI routes of the typed protocol, ``toolchain/protocol/jobs.py``), ``forge.py`` (Kernel
Forge's ``/reward`` routes on the same jobs), ``jobs.py`` (bounded queue, one job per slot / NeuronCore,
cancel, progress), ``store.py`` (SQLite: accepted jobs survive a restart; the result cache),
``auth.py`` (bearer tokens, rate limits), ``backends/`` (``simulator``: the embedded toolchain in the
OS jail; ``neuron``: the real SDK on a Trainium host), ``cluster.py`` (jobs as Ray tasks),
``client.py`` (``RemoteRunner``: the toolchain's ``Runner`` seam over HTTP), ``token_file.py`` (the one token-file reader of the CLI and the server).
"""
