"""The policy: models and tokenizers, mixed precision, one process or many (FSDP), and the
optimizer updates on one batch."""
