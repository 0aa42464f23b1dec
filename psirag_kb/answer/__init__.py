"""Answers: the LLM client, the agent and the hop discriminator."""
