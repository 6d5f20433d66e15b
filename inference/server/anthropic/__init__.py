"""The Anthropic Messages API over the embedded engine: protocol models, conversion to the internal
chat request, the reply as content blocks and stream events, errors in Anthropic's shape, and the
routes (`anthropic_router`)."""
