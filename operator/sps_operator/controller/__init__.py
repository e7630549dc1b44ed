"""kopf handlers (thin) and pure builders of the Kubernetes objects they apply."""
