"""Fixes that let fairseq 0.12.2 run on Python 3.11 + torch 2.13 (reference tooling only).

Loaded automatically when reference/ is on PYTHONPATH (see reference/env.sh).

1. Python 3.11 rejects dataclass instances as field defaults ("mutable default ... use
   default_factory"): fairseq's and hydra-core 1.0's dataclasses do exactly that. Before the
   check in dataclasses._get_field, give such a default's class an identity hash.
2. (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 is set by env.sh, not here.)
3. In eval mode, post-norm encoder layers call torch._transformer_encoder_layer_fwd with a
   padding mask but no mask_type; torch 2.13 then fails with "Mask Type should be defined".
   Pass mask_type=1 (a [B,S] key padding mask) when a 2-D mask is given.
4. numpy 2 removed aliases that fairseq's data code still uses, e.g. `np.compat.long`
   (data/token_block_dataset.py:125, language_pair_dataset.py:292: the LM task's datasets) and
   `np.int` (data/data_utils.py:488). Restore them only where missing: a `numpy.compat` module
   object with `long = int` (what numpy 1.x's numpy.compat.long was), and `numpy.int/float/
   complex/object/str` = the Python builtins (what those aliases were before numpy 1.24).
5. tasks/translation_from_pretrained_bart.py (the mBART fine-tuning task) reads `self.args`
   (load_dataset, build_generator, build_dataset_for_inference), but its base TranslationTask
   (dataclass-based, fairseq_task.py:82) only sets `self.cfg`, so fairseq-train/-generate/
   -interactive fail with "AttributeError: ... has no attribute 'args'". When that module is
   imported, give TranslationFromPretrainedBARTTask an `args` property returning `self.cfg` (the
   same object the legacy task stored as args), only if the class has no `args` of its own. An
   assignment to `args` (none in 0.12.2) would be stored and returned instead. Done with a
   post-import hook (a sys.meta_path finder that wraps that one module's exec_module), so fairseq
   is not imported by every Python start.
6. Python 3.12 removed `FileFinder.find_module`, which hydra-core 1.0's plugin scan calls
   (hydra/core/plugins.py: `importer.find_module(modname).load_module(modname)`). Where it is
   missing, give FileFinder the old method: the loader of `find_spec(name)`, or None.
"""
import dataclasses

_orig_get_field = dataclasses._get_field


def _patched_get_field(cls, a_name, a_type, *args, **kwargs):
    default = getattr(cls, a_name, dataclasses.MISSING)
    if isinstance(default, dataclasses.Field):
        default = default.default
    if (
        default is not dataclasses.MISSING
        and dataclasses.is_dataclass(type(default))
        and type(default).__hash__ is None
    ):
        type(default).__hash__ = object.__hash__
    return _orig_get_field(cls, a_name, a_type, *args, **kwargs)


dataclasses._get_field = _patched_get_field


def _patch_torch():
    import torch

    orig = torch._transformer_encoder_layer_fwd

    def fwd(*args, **kwargs):
        # signature: (src, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b, use_gelu,
        #             norm_first, eps, n1_w, n1_b, n2_w, n2_b, l1_w, l1_b, l2_w, l2_b,
        #             mask=None, mask_type=None)
        mask = kwargs.get("mask", args[18] if len(args) > 18 else None)
        has_type = "mask_type" in kwargs or len(args) > 19
        if mask is not None and not has_type and mask.dim() == 2:
            kwargs["mask_type"] = 1
        return orig(*args, **kwargs)

    torch._transformer_encoder_layer_fwd = fwd


def _patch_numpy():
    import sys
    import types

    import numpy

    if not hasattr(numpy, "compat"):
        compat = types.ModuleType("numpy.compat")
        compat.long = int
        compat.unicode = str
        compat.basestring = str
        numpy.compat = compat
        sys.modules.setdefault("numpy.compat", compat)
    elif not hasattr(numpy.compat, "long"):
        numpy.compat.long = int
    for name, value in (("int", int), ("float", float), ("complex", complex),
                        ("object", object), ("str", str)):
        if name not in vars(numpy):  # not getattr: numpy's __getattr__ warns/raises for these
            setattr(numpy, name, value)


try:
    _patch_numpy()
except Exception:  # numpy missing: nothing to patch
    pass

try:
    _patch_torch()
except Exception:  # torch missing: nothing to patch
    pass


def _fix_bart_task(module):
    cls = getattr(module, "TranslationFromPretrainedBARTTask", None)
    if cls is None or hasattr(cls, "args"):
        return

    def get_args(self):
        return self.__dict__.get("_args_fix5", self.cfg)

    def set_args(self, value):
        self.__dict__["_args_fix5"] = value

    cls.args = property(get_args, set_args)


_POST_IMPORT = {"fairseq.tasks.translation_from_pretrained_bart": _fix_bart_task}


def _install_post_import_hooks():
    import importlib.abc
    import sys

    class PostImportFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            hook = _POST_IMPORT.get(name)
            if hook is None:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            orig_exec = loader.exec_module

            def exec_module(module):
                orig_exec(module)
                hook(module)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, PostImportFinder())


_install_post_import_hooks()


def _restore_find_module():
    from importlib.machinery import FileFinder

    if hasattr(FileFinder, "find_module"):
        return

    def find_module(self, fullname, path=None):
        spec = self.find_spec(fullname)
        return spec.loader if spec is not None else None

    FileFinder.find_module = find_module


_restore_find_module()
