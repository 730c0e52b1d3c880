"""The edge: one base URL in front of the services (``python -m mldiag_platform.edge``).

``routes`` is the route table (also what the Kubernetes Ingress says), ``app`` the ASGI
reverse proxy that applies it, ``settings`` its configuration. Production puts an Ingress
in its place; ``mldiag up`` and compose run this process.
"""
