"""XProf instances: starting, serving (through the proxy), recycling and stopping them."""
