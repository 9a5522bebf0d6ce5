"""Developer scripts: test-binary builds and installs."""
