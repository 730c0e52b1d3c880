"""mldiag plumbing shared by every service: settings, logging, bus, database, storage, HTTP."""
