"""HTTP server over the embedded engine (`horizon serve`): OpenAI chat/text completions, the
Anthropic Messages API (`anthropic/`) and the OpenAI Responses API (`responses/`).

`runner.build_state` loads a checkpoint's tokenizer and engine, `app.create_app` builds the FastAPI
app, `runner.serve` / `runner.BackgroundServer` run it with uvicorn.
"""
