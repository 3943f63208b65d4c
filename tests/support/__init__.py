"""Development and test tooling: a private containerd, a kubelet emulator, fake API server and
resctrl, locally built images, and the demo. Never shipped: the wheel and the images hold none
of it."""
