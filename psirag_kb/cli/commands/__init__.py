"""The commands of `psirag-kb`, grouped by job, each `cmd_*(args, config) -> exit code`."""
