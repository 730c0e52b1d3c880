"""Pre-warming: converting landed sessions for XProf once and syncing them into instances."""
