"""Browser tests of the web console (a package, so its stack lives as long as these tests)."""
