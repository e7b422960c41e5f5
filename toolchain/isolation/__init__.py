"""Where untrusted code runs: the OS jail (bubblewrap, seccomp, cgroups), the worker process, the sandbox seam
that starts workers, and the tripwires inside a worker (which report, never decide a verdict).
"""
