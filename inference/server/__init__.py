"""OpenAI-compatible HTTP server over the embedded engine (`horizon serve`).

`runner.build_state` loads a checkpoint's tokenizer and engine, `app.create_app` builds the FastAPI
app, `runner.serve` / `runner.BackgroundServer` run it with uvicorn.
"""
