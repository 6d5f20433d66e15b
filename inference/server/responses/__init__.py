"""The OpenAI Responses API over the embedded engine: protocol models, input items -> chat messages,
output items and stream events, the bounded store behind `previous_response_id`, and the routes
(`responses_router`)."""
