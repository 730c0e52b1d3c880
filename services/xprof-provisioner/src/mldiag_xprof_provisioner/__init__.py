"""xprof-provisioner: runs XProf instances for runs' profiles, on their own ports."""
