"""The tests' name for tools/mcdump, the one reader/writer of megatron.c tensor dumps
(docs/formats/dump.md; C side: src/debug/dump.c). Loaded by path so that a directory on sys.path
holding this file cannot shadow the real module."""
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tools', 'mcdump',
                     '__init__.py')
_spec = importlib.util.spec_from_file_location('mc_tools_mcdump', _PATH)
_impl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_impl)
globals().update({k: v for k, v in vars(_impl).items() if not k.startswith('__')})
