"""The learning rate of an optax optimizer built with ``optax.inject_hyperparams``: set per step from a schedule
computed on the host, so one compiled step serves every task (the train step and the SGD probe)."""


def with_learning_rate(opt_state, lr):
  return opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": lr})
