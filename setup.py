from setuptools import find_packages, setup

setup(
    name="argus-rt",
    version="0.1.0",
    description="Argus: an embedded runtime that measures GPU programs around semantic regions",
    python_requires=">=3.10",
    packages=find_packages(include=["argus_rt", "argus_rt.*", "megakernel", "megakernel.*",
                                    "tinyllama", "tinyllama.*", "overlap", "overlap.*"]),
    # The CUDA headers and sources ship inside the wheel so that NVRTC/nvcc builds work installed.
    include_package_data=True,
    install_requires=[
        "numpy>=1.24",
        "rich>=13.0",
        "torch>=2.3",
    ],
    extras_require={
        "triton": ["triton>=3.4"],
        # Kernel launches and NVRTC builds on a GPU machine (nvcc builds need neither).
        "cuda": ["cuda-python>=12.6"],
        # Loading a local Hugging Face TinyLlama checkpoint.
        "hf": ["safetensors>=0.4"],
        "test": ["pytest>=7.4", "hypothesis>=6.90", "pytest-timeout>=2.2", "safetensors>=0.4", "matplotlib>=3.7"],
        "plot": ["matplotlib>=3.7"],
    },
    entry_points={"console_scripts": ["argus=argus_rt.cli:main"]},
)
