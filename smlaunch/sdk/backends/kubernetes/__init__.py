"""The Kubernetes platform: :class:`~smlaunch.sdk.sessions.kubernetes.KubernetesSession`'s options
(:mod:`.options`), the API client and its errors (:mod:`.client`), the pure plan of a job's objects
(:mod:`.plan`) and the backend that checks a job against the cluster (:mod:`.backend`)."""
