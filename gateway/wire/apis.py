"""The names of the client-facing APIs, shared by the ingress codecs (which decode them)
and the provider translations (which say which API their answers are in)."""

OPENAI_CHAT = "openai.chat"
OPENAI_COMPLETIONS = "openai.completions"
OPENAI_RESPONSES = "openai.responses"
OPENAI_EMBEDDINGS = "openai.embeddings"
ANTHROPIC_MESSAGES = "anthropic.messages"
