"""lasp_jax: Look-Ahead Selective Plasticity (LASP) and Co2L in JAX/Flax."""
