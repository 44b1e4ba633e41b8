"""FedSub: class prototypes and class subnetworks, clustered and fused per class on each device.

``method`` is the method; the rest serves it alone: ``clustering`` (K-means with K chosen by the
Davies–Bouldin index), ``subnetworks`` (naive and LRP extraction), ``row_fusion`` (Eq. 6-10 as
weighted sums of parameter rows), ``collaborative`` (predicted prototypes, ubiquitous Alg. 3) and
``privacy`` (noisy prototypes, journal Sec. 3.3)."""

from p2pfed.algorithms.fedsub import method  # noqa: F401  (registration)
