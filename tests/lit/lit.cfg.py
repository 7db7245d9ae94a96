# lit configuration for lcejit: passes, verifier rules and emitter output.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "lcejit"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.lcejit_obj_root, "tests", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]

llvm_config.use_default_substitutions()
# `not`, `count`, FileCheck on PATH for RUN lines that start with them.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["lcejit-opt", "lcejit-dump", "lcejit-bench", "lcejit-demo"],
                                   [config.lcejit_bin_dir])
# Never let a developer's cache or knobs leak into lit runs.
config.environment["LCEJIT_CACHE_DIR"] = os.path.join(config.test_exec_root, "cache")
for knob in ["LCEJIT_CACHE", "LCEJIT_DUMP", "LCEJIT_DUMP_DIR", "LCEJIT_ALWAYS_COMPILE",
             "LCEJIT_ASSERT_NO_COMPILE", "LCEJIT_LOG"]:
    config.environment.pop(knob, None)
