"""Stand-ins for the Megatron enum classes a checkpoint pickle names, so torch.load can open
megatron.c checkpoints without Megatron installed (values as in Megatron-LM core_v0.12.1)."""
import enum
import sys
import types


def install():
    if 'megatron.core.enums' in sys.modules:
        return

    def mod(name):
        m = types.ModuleType(name)
        sys.modules[name] = m
        return m

    mod('megatron')
    mod('megatron.core')
    mod('megatron.core.transformer')

    class ModelType(enum.Enum):
        encoder_or_decoder = 1
        encoder_and_decoder = 2
        retro_encoder = 3
        retro_decoder = 4

    class AttnBackend(enum.Enum):
        flash = 1
        fused = 2
        unfused = 3
        local = 4
        auto = 5

    class RerunMode(str, enum.Enum):
        DISABLED = 'disabled'
        VALIDATE_RESULTS = 'validate_results'
        REPORT_DETERMINISM_STATS = 'report_determinism_stats'

    class RerunState(enum.Enum):
        NOT_RUNNING_YET = 0
        INITIAL_RUN = 1
        RERUNNING_IN_PLACE = 2
        WILL_RERUN_FROM_CHECKPOINT = 3
        RERUNNING_FROM_CHECKPOINT = 4
        RERUNNING_AGAIN_FROM_CHECKPOINT = 5

    class RerunDiagnostic(str, enum.Enum):
        CORRECT_RESULT = 'correct_result'
        TRANSIENT_ERROR = 'transient_error'
        PERSISTENT_ERROR = 'persistent_error'

    # named as Megatron's own classes, so that torch.save can write them back
    for cls, where in ((ModelType, 'megatron.core.enums'), (AttnBackend, 'megatron.core.transformer.enums'),
                       (RerunMode, 'megatron.core.rerun_state_machine'),
                       (RerunState, 'megatron.core.rerun_state_machine'),
                       (RerunDiagnostic, 'megatron.core.rerun_state_machine')):
        cls.__module__, cls.__qualname__ = where, cls.__name__
    mod('megatron.core.enums').ModelType = ModelType
    mod('megatron.core.transformer.enums').AttnBackend = AttnBackend
    r = mod('megatron.core.rerun_state_machine')
    r.RerunMode, r.RerunState, r.RerunDiagnostic = RerunMode, RerunState, RerunDiagnostic
