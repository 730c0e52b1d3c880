"""The web console: a single-page app built from ``console/`` at the repository root into
``static/`` here (``make console``), served at ``/console/`` on the API port."""
