"""densex's Hydra launcher plugin (`hydra/launcher=slurm`): Hydra instantiates launchers only
from the `hydra_plugins` namespace package, so the SLURM launcher lives here, beside the
hydra-submitit-launcher plugin it extends (`launcher.SlurmLauncher`)."""
