"""What a model is, shared by every part that reads its tokens: the catalogue of models Tether can
name and where their weights come from (`catalog.py`), the chat template that renders messages to the
exact prompt tokens (`chat_template.py`), and the tool-call format with its parser and streaming filter
(`tools.py`, `chat_templates/`). The adapters, the learner, the engines, vLLM's launch and the dashboard
all read these; nothing here loads torch until a model is built.
"""
