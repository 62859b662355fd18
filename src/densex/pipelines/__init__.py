"""One function per entry script: `run(cfg) -> metric`."""
