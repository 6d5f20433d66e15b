"""Horizon agent runtime: loop, tools, backends, CLI."""
