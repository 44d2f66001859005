"""SDM: scientific data manager."""
