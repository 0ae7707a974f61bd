"""sandrail.interpreters: everything that touches the world."""
