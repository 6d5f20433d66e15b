"""An example Horizon tool plugin (see README.md)."""
