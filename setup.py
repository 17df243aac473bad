from setuptools import find_packages, setup

setup(
    name="argus-rt",
    version="0.1.0",
    description="Argus: an embedded runtime that measures GPU programs around semantic regions",
    python_requires=">=3.10",
    packages=find_packages(include=["argus_rt", "argus_rt.*", "megakernel", "megakernel.*",
                                    "tinyllama", "tinyllama.*", "overlap", "overlap.*"]),
    # csrc/ (CUDA headers and sources) and examples/ are read from the checkout: install editable (-e).
    install_requires=[
        "numpy>=1.24",
        "rich>=13.0",
        "torch>=2.3",
        # Kernel launches (driver API) and NVRTC builds; imports cleanly on machines without a GPU.
        "cuda-python>=12.6",
    ],
    extras_require={
        "triton": ["triton>=3.4"],
        # NVRTC on machines without the CUDA toolkit (nvcc builds do not need it).
        "nvrtc": ["nvidia-cuda-nvrtc>=12.6"],
        # Loading a local Hugging Face TinyLlama checkpoint.
        "hf": ["safetensors>=0.4"],
        "test": ["pytest>=7.4", "hypothesis>=6.90", "pytest-timeout>=2.2", "safetensors>=0.4", "matplotlib>=3.7"],
        "plot": ["matplotlib>=3.7"],
    },
    entry_points={"console_scripts": ["argus=argus_rt.cli:main"]},
)
