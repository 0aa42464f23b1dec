"""psirag-kb."""
