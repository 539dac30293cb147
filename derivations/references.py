"""The works memderive cites, as data: one entry per paper, datasheet, documentation page or source file.

Every ``Citation`` in the code (``symbolic.formula``) names one of these keys plus the table, equation,
section or function it relies on; ``cite`` writes a citation out, ``cited`` lists the entries a set of
citations uses (for a document's References section). ``where`` is an arXiv id, a URL without its scheme, or
a repository file (pinned to the commit or release the code was read at, where the code says so).

>>> cite(Citation("korthikanti-2022", "Eq. 1, Table 2"))
'Korthikanti et al. 2022, arXiv:2205.05198, Eq. 1, Table 2'
>>> cite(Citation("korthikanti-2022", "Eq. 1"), keyed=True)
'Korthikanti et al. 2022 [korthikanti-2022], Eq. 1'
>>> reference("korthikanti-2022").url
'https://arxiv.org/abs/2205.05198'
>>> reference("korthikanti")
Traceback (most recent call last):
...
memderive.derivations.references.UnknownReference: no reference 'korthikanti'; memderive references lists the keys (did you mean korthikanti-2022?)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from memderive.symbolic.errors import DerivationError
from memderive.symbolic.formula import Citation
from memderive.symbolic.lazy import lazy

difflib = lazy("difflib")  # read only for an unknown key's hint (tests/test_cold_path.py: the cold estimate does not load it)

__all__ = ["Reference", "REFERENCES", "reference", "cite", "cited", "UnknownReference"]

KINDS = ("paper", "report", "blog", "docs", "code", "datasheet")


class UnknownReference(DerivationError, KeyError):
    """A key that is not in the table."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, slots=True)
class Reference:
    """One cited work.

    Attributes:
        key: how citations name it (``korthikanti-2022``).
        label: how a text cites it (``Korthikanti et al. 2022``).
        authors: the authors as the work lists them (``et al.`` past the first few).
        title: the title, or for a file what it is.
        year: publication year (``None`` for living documents: datasheets, files read at a commit).
        where: ``arXiv:2205.05198``, a URL without ``https://``, or a repository file.
        kind: one of ``KINDS``.
        venue: where a paper appeared, if not only on arXiv.
    """

    key: str
    label: str
    authors: str
    title: str
    year: int | None
    where: str
    kind: str
    venue: str = ""

    def __post_init__(self) -> None:
        Citation(self.key)  # the key's spelling rule
        if self.kind not in KINDS or not (self.label and self.authors and self.title and self.where):
            raise ValueError(f"reference {self.key!r}: label, authors, title, where and a kind in {KINDS} are needed")

    @property
    def url(self) -> str:
        """The web address; empty for a file of this repository."""
        if self.where.startswith("arXiv:"):
            return f"https://arxiv.org/abs/{self.where.removeprefix('arXiv:')}"
        return f"https://{self.where}" if "." in self.where.split("/")[0] else ""

    def entry(self) -> str:
        """The full entry on one line: authors, title, venue and year, place."""
        year = f" {self.year}." if self.year else ""
        venue = f" {self.venue}." if self.venue else ""
        return f"{self.authors.rstrip('.')}. {self.title}.{venue}{year} {self.where}"

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "label": self.label, "authors": self.authors, "title": self.title, "year": self.year,
                "where": self.where, "url": self.url, "kind": self.kind, "venue": self.venue}


def _paper(key: str, label: str, authors: str, title: str, year: int, arxiv: str, venue: str = "") -> Reference:
    return Reference(key, label, authors, title, year, f"arXiv:{arxiv}", "paper", venue)


_NV = "NVIDIA"
_HF = "Hugging Face"


def _transformers_file(key: str, path: str, detail: str = "") -> Reference:
    """A source file of transformers 5.24 (``path`` under ``src/transformers/``), pinned to its v5.24.0 tag."""
    title = f"transformers 5.24: src/transformers/{path}" + (f" ({detail})" if detail else "")
    return Reference(key, "transformers 5.24", _HF, title, None,
                     f"github.com/huggingface/transformers/blob/v5.24.0/src/transformers/{path}", "code")


_ENTRIES: tuple[Reference, ...] = (
    # --- training memory, parallelism, compute ---------------------------------------------------------------
    _paper("korthikanti-2022", "Korthikanti et al. 2022", "V. A. Korthikanti, J. Casper, S. Lym, L. McAfee, "
           "M. Andersch, M. Shoeybi, B. Catanzaro", "Reducing Activation Recomputation in Large Transformer Models",
           2022, "2205.05198", "MLSys 2023"),
    _paper("rajbhandari-2020", "Rajbhandari et al. 2020 (ZeRO)", "S. Rajbhandari, J. Rasley, O. Ruwase, Y. He",
           "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", 2020, "1910.02054", "SC20"),
    _paper("ren-2021", "Ren et al. 2021 (ZeRO-Offload)", "J. Ren, S. Rajbhandari, R. Y. Aminabadi, O. Ruwase, S. Yang, "
           "M. Zhang, D. Li, Y. He", "ZeRO-Offload: Democratizing Billion-Scale Model Training", 2021, "2101.06840",
           "USENIX ATC 2021"),
    _paper("rajbhandari-2021", "Rajbhandari et al. 2021 (ZeRO-Infinity)", "S. Rajbhandari, O. Ruwase, J. Rasley, "
           "S. Smith, Y. He", "ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme Scale Deep Learning", 2021,
           "2104.07857", "SC21"),
    _paper("narayanan-2021", "Narayanan et al. 2021", "D. Narayanan, M. Shoeybi, J. Casper, P. LeGresley, M. Patwary, "
           "V. Korthikanti, D. Vainbrand, P. Kashinkunti, J. Bernauer, B. Catanzaro, A. Phanishayee, M. Zaharia",
           "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", 2021, "2104.04473", "SC21"),
    _paper("kaplan-2020", "Kaplan et al. 2020", "J. Kaplan, S. McCandlish, T. Henighan, T. B. Brown, B. Chess, R. Child, "
           "S. Gray, A. Radford, J. Wu, D. Amodei", "Scaling Laws for Neural Language Models", 2020, "2001.08361"),
    _paper("chowdhery-2022", "Chowdhery et al. 2022 (PaLM)", "A. Chowdhery, S. Narang, J. Devlin, et al.",
           "PaLM: Scaling Language Modeling with Pathways", 2022, "2204.02311"),
    _paper("jiang-2024-megascale", "Jiang et al. 2024 (MegaScale)", "Z. Jiang, H. Lin, Y. Zhong, Q. Huang, Y. Chen, "
           "Z. Zhang, et al.", "MegaScale: Scaling Large Language Model Training to More Than 10,000 GPUs", 2024,
           "2402.15627", "NSDI 2024"),
    _paper("dao-2022", "Dao et al. 2022 (FlashAttention)", "T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Ré",
           "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness", 2022, "2205.14135",
           "NeurIPS 2022"),
    _paper("dao-2023", "Dao 2023 (FlashAttention-2)", "T. Dao",
           "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023, "2307.08691"),
    _paper("deepseek-v3-isca", "Zhao et al. 2025 (Insights into DeepSeek-V3)", "C. Zhao, C. Deng, C. Ruan, D. Dai, "
           "et al. (DeepSeek-AI)", "Insights into DeepSeek-V3: Scaling Challenges and Reflections on Hardware for AI "
           "Architectures", 2025, "2505.09343", "ISCA 2025"),
    _paper("shah-2024", "Shah et al. 2024 (FlashAttention-3)", "J. Shah, G. Bikshandi, Y. Zhang, V. Thakkar, "
           "P. Ramani, T. Dao", "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision",
           2024, "2407.08608", "NeurIPS 2024"),
    _paper("dao-gu-2024", "Dao & Gu 2024 (Mamba-2)", "T. Dao, A. Gu", "Transformers are SSMs: Generalized Models and "
           "Efficient Algorithms Through Structured State Space Duality", 2024, "2405.21060", "ICML 2024"),
    # --- mixture of experts ----------------------------------------------------------------------------------
    _paper("lepikhin-2020", "Lepikhin et al. 2020 (GShard)", "D. Lepikhin, H. Lee, Y. Xu, D. Chen, O. Firat, Y. Huang, "
           "M. Krikun, N. Shazeer, Z. Chen", "GShard: Scaling Giant Models with Conditional Computation and Automatic "
           "Sharding", 2020, "2006.16668"),
    _paper("rajbhandari-2022", "Rajbhandari et al. 2022 (DeepSpeed-MoE)", "S. Rajbhandari, C. Li, Z. Yao, M. Zhang, "
           "R. Y. Aminabadi, A. A. Awan, J. Rasley, Y. He", "DeepSpeed-MoE: Advancing Mixture-of-Experts Inference and "
           "Training to Power Next-Generation AI Scale", 2022, "2201.05596", "ICML 2022"),
    _paper("dai-2024", "Dai et al. 2024 (DeepSeekMoE)", "D. Dai, C. Deng, C. Zhao, et al.", "DeepSeekMoE: Towards "
           "Ultimate Expert Specialization in Mixture-of-Experts Language Models", 2024, "2401.06066"),
    # --- inference: KV cache, quantization -------------------------------------------------------------------
    Reference("kipply-2022", "kipply 2022", "kipply", "Transformer Inference Arithmetic", 2022,
              "kipp.ly/transformer-inference-arithmetic/", "blog"),
    _paper("shazeer-2019", "Shazeer 2019 (MQA)", "N. Shazeer", "Fast Transformer Decoding: One Write-Head is All You "
           "Need", 2019, "1911.02150"),
    _paper("ainslie-2023", "Ainslie et al. 2023 (GQA)", "J. Ainslie, J. Lee-Thorp, M. de Jong, Y. Zemlyanskiy, "
           "F. Lebrón, S. Sanghai", "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head "
           "Checkpoints", 2023, "2305.13245", "EMNLP 2023"),
    Reference("zhihu-624740065", "回旋托马斯x (Zhihu)", "回旋托马斯x",
              "分析transformer模型的参数量、计算量、中间激活、KV cache", None, "zhuanlan.zhihu.com/p/624740065", "blog"),
    _paper("frantar-2022", "Frantar et al. 2022 (GPTQ)", "E. Frantar, S. Ashkboos, T. Hoefler, D. Alistarh",
           "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers", 2022, "2210.17323",
           "ICLR 2023"),
    _paper("lin-2023", "Lin et al. 2023 (AWQ)", "J. Lin, J. Tang, H. Tang, S. Yang, X. Dang, S. Han, et al.",
           "AWQ: Activation-aware Weight Quantization for LLM Compression and Acceleration", 2023, "2306.00978",
           "MLSys 2024"),
    # --- fine-tuning -----------------------------------------------------------------------------------------
    _paper("hu-2021", "Hu et al. 2021 (LoRA)", "E. J. Hu, Y. Shen, P. Wallis, Z. Allen-Zhu, Y. Li, S. Wang, L. Wang, "
           "W. Chen", "LoRA: Low-Rank Adaptation of Large Language Models", 2021, "2106.09685", "ICLR 2022"),
    _paper("dettmers-2023", "Dettmers et al. 2023 (QLoRA)", "T. Dettmers, A. Pagnoni, A. Holtzman, L. Zettlemoyer",
           "QLoRA: Efficient Finetuning of Quantized LLMs", 2023, "2305.14314", "NeurIPS 2023"),
    _paper("dettmers-2022", "Dettmers et al. 2022 (LLM.int8())", "T. Dettmers, M. Lewis, Y. Belkada, L. Zettlemoyer",
           "LLM.int8(): 8-bit Matrix Multiplication for Transformers at Scale", 2022, "2208.07339", "NeurIPS 2022"),
    # --- models (the bundled presets' sizes) -----------------------------------------------------------------
    Reference("radford-2019", "Radford et al. 2019 (GPT-2)", "A. Radford, J. Wu, R. Child, D. Luan, D. Amodei, "
              "I. Sutskever", "Language Models are Unsupervised Multitask Learners", 2019,
              "cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf", "report",
              "OpenAI"),
    _paper("brown-2020", "Brown et al. 2020 (GPT-3)", "T. B. Brown, B. Mann, N. Ryder, M. Subbiah, et al.",
           "Language Models are Few-Shot Learners", 2020, "2005.14165", "NeurIPS 2020"),
    _paper("devlin-2019", "Devlin et al. 2019 (BERT)", "J. Devlin, M.-W. Chang, K. Lee, K. Toutanova", "BERT: "
           "Pre-training of Deep Bidirectional Transformers for Language Understanding", 2019, "1810.04805", "NAACL 2019"),
    _paper("touvron-2023-llama", "Touvron et al. 2023 (LLaMA)", "H. Touvron, T. Lavril, G. Izacard, X. Martinet, et al.",
           "LLaMA: Open and Efficient Foundation Language Models", 2023, "2302.13971"),
    _paper("touvron-2023-llama2", "Touvron et al. 2023 (Llama 2)", "H. Touvron, L. Martin, K. Stone, et al.",
           "Llama 2: Open Foundation and Fine-Tuned Chat Models", 2023, "2307.09288"),
    _paper("dubey-2024", "Dubey et al. 2024 (Llama 3)", "A. Dubey, A. Jauhri, A. Pandey, et al. (Llama Team, AI @ Meta)",
           "The Llama 3 Herd of Models", 2024, "2407.21783"),
    _paper("jiang-2023-mistral", "Jiang et al. 2023 (Mistral 7B)", "A. Q. Jiang, A. Sablayrolles, A. Mensch, et al.",
           "Mistral 7B", 2023, "2310.06825"),
    _paper("jiang-2024-mixtral", "Jiang et al. 2024 (Mixtral)", "A. Q. Jiang, A. Sablayrolles, A. Roux, et al.",
           "Mixtral of Experts", 2024, "2401.04088"),
    _paper("yang-2024-qwen2", "Yang et al. 2024 (Qwen2)", "A. Yang, B. Yang, B. Hui, et al. (Qwen Team)",
           "Qwen2 Technical Report", 2024, "2407.10671"),
    _paper("qwen-2025-qwen3", "Qwen Team 2025 (Qwen3)", "Qwen Team", "Qwen3 Technical Report", 2025, "2505.09388"),
    _paper("gemma-2024", "Gemma Team 2024 (Gemma)", "Gemma Team, Google DeepMind", "Gemma: Open Models Based on Gemini "
           "Research and Technology", 2024, "2403.08295"),
    _paper("gemma-2024-gemma2", "Gemma Team 2024 (Gemma 2)", "Gemma Team, Google DeepMind", "Gemma 2: Improving Open "
           "Language Models at a Practical Size", 2024, "2408.00118"),
    _paper("abdin-2024", "Abdin et al. 2024 (Phi-3)", "M. Abdin, et al. (Microsoft)", "Phi-3 Technical Report: A Highly "
           "Capable Language Model Locally on Your Phone", 2024, "2404.14219"),
    _paper("almazrouei-2023", "Almazrouei et al. 2023 (Falcon)", "E. Almazrouei, et al.", "The Falcon Series of Open "
           "Language Models", 2023, "2311.16867"),
    _paper("zhang-2022-opt", "Zhang et al. 2022 (OPT)", "S. Zhang, S. Roller, N. Goyal, et al.", "OPT: Open Pre-trained "
           "Transformer Language Models", 2022, "2205.01068"),
    _paper("bigscience-2022", "BigScience 2022 (BLOOM)", "BigScience Workshop", "BLOOM: A 176B-Parameter Open-Access "
           "Multilingual Language Model", 2022, "2211.05100"),
    _paper("deepseek-2024-v2", "DeepSeek-AI 2024 (DeepSeek-V2)", "DeepSeek-AI", "DeepSeek-V2: A Strong, Economical, and "
           "Efficient Mixture-of-Experts Language Model", 2024, "2405.04434"),
    _paper("deepseek-2024-v3", "DeepSeek-AI 2024 (DeepSeek-V3)", "DeepSeek-AI", "DeepSeek-V3 Technical Report", 2024,
           "2412.19437"),
    _paper("openai-2025-gpt-oss", "OpenAI 2025 (gpt-oss)", "OpenAI", "gpt-oss-120b & gpt-oss-20b Model Card", 2025,
           "2508.10925"),
    Reference("microsoft-phi-2", "microsoft/phi-2 model card", "Microsoft", "phi-2 model card and config.json", None,
              "huggingface.co/microsoft/phi-2", "docs"),
    # --- other tools' accounting (memderive compare) and the code whose behaviour we model -------------------
    Reference("megatron-theoretical-memory", "Megatron-LM", _NV, "Megatron-LM: megatron/training/"
              "theoretical_memory_usage.py", 2023, "github.com/NVIDIA/Megatron-LM/blob/00caa53a/megatron/training/"
              "theoretical_memory_usage.py", "code"),
    Reference("deepspeed-zero2-estimator", "DeepSpeed", "Microsoft DeepSpeed", "DeepSpeed: deepspeed/runtime/zero/"
              "stage_1_and_2.py", None, "github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/zero/"
              "stage_1_and_2.py", "code"),
    Reference("deepspeed-zero3-estimator", "DeepSpeed", "Microsoft DeepSpeed", "DeepSpeed: deepspeed/runtime/zero/"
              "stage3.py", None, "github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/zero/stage3.py", "code"),
    Reference("llm-analysis", "llm-analysis 0.2.2", "cli99", "llm-analysis 0.2.2 (PyPI): llm_analysis/analysis.py", None,
              "github.com/cli99/llm-analysis/blob/main/llm_analysis/analysis.py", "code"),
    Reference("eleuther-calc-mem", "EleutherAI cookbook", "EleutherAI", "cookbook: calc/calc_transformer_mem.py", None,
              "github.com/EleutherAI/cookbook/blob/827ee3b/calc/calc_transformer_mem.py", "code"),
    Reference("accelerate-estimate", "accelerate 1.15", _HF, "accelerate 1.15: src/accelerate/commands/estimate.py",
              None, "github.com/huggingface/accelerate/blob/v1.15.0/src/accelerate/commands/estimate.py", "code"),
    Reference("accelerate-estimator-docs", "Hugging Face accelerate docs", _HF, "Accelerate documentation: Model memory "
              "estimator", None, "huggingface.co/docs/accelerate/usage_guides/model_size_estimator", "docs"),
    Reference("transformers-mxfp4", "transformers 5.24", _HF, "transformers: src/transformers/integrations/mxfp4.py",
              None, "github.com/huggingface/transformers/blob/v5.24.0/src/transformers/integrations/mxfp4.py", "code"),
    Reference("ocp-2023-mx", "OCP 2023 (MX v1.0)", "Open Compute Project (AMD, Arm, Intel, Meta, Microsoft, NVIDIA, "
              "Qualcomm)", "OCP Microscaling Formats (MX) Specification, Version 1.0", 2023,
              "www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf", "report"),
    Reference("transformers-quantizers", "transformers 5.25", _HF, "transformers: src/transformers/quantizers/ and "
              "integrations/ (finegrained_fp8.py, fbgemm_fp8.py, bitsandbytes.py, mxfp4.py)", None,
              "github.com/huggingface/transformers/tree/v5.25.0/src/transformers/integrations", "code"),
    Reference("gguf-spec", "ggml", "ggml-org", "GGUF file format (ggml docs/gguf.md) and gguf-py constants.py "
              "(GGML_QUANT_SIZES)", None, "github.com/ggml-org/ggml/blob/master/docs/gguf.md", "code"),
    Reference("safetensors-format", "safetensors", _HF, "safetensors: the format (8-byte little-endian header "
              "length, JSON header of dtype, shape, data_offsets)", None, "github.com/huggingface/safetensors", "code"),
    Reference("transformers-generate", "transformers 5.x", _HF, "transformers: src/transformers/generation/utils.py",
              None, "github.com/huggingface/transformers/blob/main/src/transformers/generation/utils.py", "code"),
    Reference("transformers-cache-utils", "transformers 5.x", _HF, "transformers: src/transformers/cache_utils.py",
              None, "github.com/huggingface/transformers/blob/main/src/transformers/cache_utils.py", "code"),
    Reference("memderive", "memderive", "memderive", "memderive's graph derivation (this repository)", None,
              "derivations/estimate.py", "code"),
    # --- hardware --------------------------------------------------------------------------------------------
    Reference("nvidia-a100-datasheet", "NVIDIA A100 datasheet", _NV, "NVIDIA A100 Tensor Core GPU datasheet", None,
              "nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-"
              "web.pdf", "datasheet"),
    Reference("nvidia-cuda-gpus", "NVIDIA, CUDA GPUs", _NV, "CUDA GPU Compute Capability (the table of NVIDIA GPUs "
              "by compute capability)", None, "developer.nvidia.com/cuda-gpus", "datasheet"),
    Reference("amd-rocm-gpu-specs", "AMD, ROCm GPU specifications", "AMD", "ROCm documentation: GPU hardware "
              "specifications (Instinct accelerators, their LLVM targets)", None,
              "rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html", "datasheet"),
    Reference("nvidia-h100-datasheet", "NVIDIA H100 datasheet", _NV, "NVIDIA H100 Tensor Core GPU datasheet", None,
              "resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet", "datasheet"),
    Reference("philisun-h800", "Philisun, H800 vs H100", "Philisun", "NVIDIA H800 vs H100: A Technical Deep Dive "
              "into Politically-Defined AI Chips", None, "philisun.com/technical-analysis/nvidia-h800-vs-h100-a-"
              "technical-deep-dive-into-politically-defined-ai-chips", "blog"),
    Reference("tomshardware-h800", "Tom's Hardware, H800", "Tom's Hardware", "Nvidia Gimps H100 Hopper GPU to Sell "
              "as H800 to China (the A800: the A100 with its interconnect cut from 600 to 400 GBps)", 2023,
              "tomshardware.com/news/nvidia-gimps-h100-hopper-gpu-to-sell-as-h800-to-china", "blog"),
    Reference("nvidia-h200-datasheet", "NVIDIA H200 datasheet", _NV, "NVIDIA H200 Tensor Core GPU datasheet", None,
              "nvidia.com/en-us/data-center/h200/", "datasheet"),
    Reference("nvidia-dgx-b200-datasheet", "NVIDIA DGX B200 datasheet", _NV, "NVIDIA DGX B200 datasheet", None,
              "nvidia.com/en-us/data-center/dgx-b200/", "datasheet"),
    Reference("nvidia-gb200-nvl72-datasheet", "NVIDIA GB200 NVL72 datasheet", _NV, "NVIDIA GB200 NVL72 datasheet",
              None, "nvidia.com/en-us/data-center/gb200-nvl72/", "datasheet"),
    Reference("nvidia-dgx-b300-datasheet", "NVIDIA DGX B300 datasheet", _NV, "NVIDIA DGX B300 datasheet", None,
              "nvidia.com/en-us/data-center/dgx-b300/", "datasheet"),
    Reference("nvidia-hgx-b300", "NVIDIA HGX B300 specifications", _NV, "NVIDIA HGX platform: HGX B300 "
              "specifications", None, "nvidia.com/en-us/data-center/hgx/", "datasheet"),
    Reference("nvidia-gb300-nvl72-datasheet", "NVIDIA GB300 NVL72 datasheet", _NV, "NVIDIA GB300 NVL72 datasheet",
              None, "nvidia.com/en-us/data-center/gb300-nvl72/", "datasheet"),
    Reference("nvidia-blackwell-ultra-blog", "NVIDIA 2025 (Blackwell Ultra)", _NV, "Inside NVIDIA Blackwell Ultra: "
              "The Chip Powering the AI Factory Era", 2025,
              "developer.nvidia.com/blog/inside-nvidia-blackwell-ultra-the-chip-powering-the-ai-factory-era/", "blog"),
    Reference("nvidia-a100-whitepaper", "NVIDIA A100 whitepaper", _NV, "NVIDIA A100 Tensor Core GPU Architecture "
              "whitepaper (Table 1: A100 108 SMs)", None, "images.nvidia.com/aem-dam/en-zz/Solutions/data-center/"
              "nvidia-ampere-architecture-whitepaper.pdf", "datasheet"),
    Reference("nvidia-h100-whitepaper", "NVIDIA H100 whitepaper", _NV, "NVIDIA H100 Tensor Core GPU Architecture "
              "whitepaper (Table 3: H100 SXM5 132 SMs, H100 PCIe 114 SMs)", None,
              "resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper", "datasheet"),
    Reference("nvidia-volta-whitepaper", "NVIDIA V100 whitepaper", _NV, "NVIDIA Tesla V100 GPU Architecture "
              "whitepaper (Table 1: Tesla V100 80 SMs)", None,
              "images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf", "datasheet"),
    Reference("nvidia-l40s-datasheet", "NVIDIA L40S datasheet", _NV, "NVIDIA L40S datasheet", None,
              "nvidia.com/en-us/data-center/l40s/", "datasheet"),
    Reference("nvidia-ada-whitepaper", "NVIDIA Ada whitepaper", _NV, "NVIDIA Ada GPU Architecture whitepaper v2.1",
              None, "images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf", "datasheet"),
    Reference("amd-mi300x-datasheet", "AMD MI300X datasheet", "AMD", "AMD Instinct MI300X datasheet", None,
              "amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
              "datasheet"),
    Reference("nvidia-v100-datasheet", "NVIDIA V100 datasheet", _NV, "NVIDIA Tesla V100 GPU datasheet", None,
              "images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
              "datasheet"),
    Reference("nvidia-a10-datasheet", "NVIDIA A10 datasheet", _NV, "NVIDIA A10 Tensor Core GPU datasheet", None,
              "nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf",
              "datasheet"),
    Reference("nvidia-rtx-a6000-datasheet", "NVIDIA RTX A6000 datasheet", _NV, "NVIDIA RTX A6000 datasheet", None,
              "nvidia.com/content/dam/en-zz/Solutions/design-visualization/quadro-product-literature/"
              "proviz-print-nvidia-rtx-a6000-datasheet-us-nvidia-1454980-r9-web.pdf", "datasheet"),
    Reference("nvidia-ga102-whitepaper", "NVIDIA Ampere GA102 whitepaper", _NV, "NVIDIA Ampere GA102 GPU "
              "Architecture whitepaper", None, "images.nvidia.com/aem-dam/en-zz/Solutions/geforce/ampere/pdf/"
              "NVIDIA-ampere-GA102-GPU-Architecture-Whitepaper-V1.pdf", "datasheet"),
    Reference("nvidia-l4-datasheet", "NVIDIA L4 datasheet", _NV, "NVIDIA L4 Tensor Core GPU datasheet", None,
              "nvidia.com/en-us/data-center/l4/", "datasheet"),
    Reference("nvidia-t4-datasheet", "NVIDIA T4 datasheet", _NV, "NVIDIA T4 Tensor Core GPU datasheet", None,
              "nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
              "datasheet"),
    # --- the runtime around a step (derivations/quantities/runtime.py, serving.py) ---------------------------
    Reference("pytorch-cublas-handle-pool", "PyTorch", "PyTorch", "PyTorch: aten/src/ATen/cuda/CublasHandlePool.cpp",
              None, "github.com/pytorch/pytorch/blob/main/aten/src/ATen/cuda/CublasHandlePool.cpp", "code"),
    Reference("pytorch-caching-allocator", "PyTorch", "PyTorch", "PyTorch: c10/cuda/CUDACachingAllocator.cpp", None,
              "github.com/pytorch/pytorch/blob/main/c10/cuda/CUDACachingAllocator.cpp", "code"),
    Reference("nccl-memory-964", "NVIDIA/nccl#964", "ConnollyLeon", "NCCL issue 964: Question about GPU memory "
              "consumption of NCCL (4 A100, NVLink)", 2023, "github.com/NVIDIA/nccl/issues/964", "report"),
    Reference("nccl-alltoall-1685", "NVIDIA/nccl#1685", "kwen2501", "NCCL issue 1685: all-to-all triggers many "
              "channels and a large memory usage (8 H100)", 2025, "github.com/NVIDIA/nccl/issues/1685", "report"),
    Reference("nccl-sms-689", "NVIDIA/nccl#689", "korsaka, sjeaugey", "NCCL issue 689: do NCCL's all-reduce kernels "
              "slow down compute kernels? The maintainer: one CUDA block per channel, limited by what one SM moves; "
              "'NCCL CTAs won't share an SM with compute kernels'; 'on DGX with 8 NICs ... it would use 16 SMs'", 2023,
              "github.com/NVIDIA/nccl/issues/689", "report"),
    Reference("vllm-mla-common", "vLLM", "vLLM project", "vLLM: vllm/v1/attention/backends/mla/common.py", None,
              "github.com/vllm-project/vllm/blob/main/vllm/v1/attention/backends/mla/common.py", "code"),
    Reference("vllm-gpu-worker", "vLLM", "vLLM project", "vLLM: vllm/v1/worker/gpu_worker.py", None,
              "github.com/vllm-project/vllm/blob/main/vllm/v1/worker/gpu_worker.py", "code"),
    Reference("vllm-kv-cache-utils", "vLLM", "vLLM project", "vLLM: vllm/v1/core/kv_cache_utils.py", None,
              "github.com/vllm-project/vllm/blob/main/vllm/v1/core/kv_cache_utils.py", "code"),
    Reference("vllm-arg-utils", "vLLM", "vLLM project", "vLLM: vllm/engine/arg_utils.py", None,
              "github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py", "code"),
    # --- the step timeline (symbolic/timeline.py, kernels.py, hf_programs.py) -----------------------------
    Reference("pytorch-derivatives", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: tools/autograd/derivatives.yaml "
              "(what each autograd node saves and computes)", None,
              "github.com/pytorch/pytorch/blob/v2.13.0/tools/autograd/derivatives.yaml", "code"),
    Reference("pytorch-autograd-engine", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: torch/csrc/autograd/engine.cpp "
              "(ready queue by sequence number, validate_outputs) and input_buffer.cpp, accumulate_grad.h", None,
              "github.com/pytorch/pytorch/blob/v2.13.0/torch/csrc/autograd/engine.cpp", "code"),
    Reference("pytorch-min-cut-partitioner", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: "
              "torch/_functorch/partitioners.py (min_cut_rematerialization_partition, solve_min_cut, "
              "get_default_op_list; AOTAutograd's joint-graph partition, used by Inductor)", None,
              "github.com/pytorch/pytorch/blob/v2.13.0/torch/_functorch/partitioners.py", "code"),
    Reference("pytorch-adam", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: torch/optim/adam.py (_multi_tensor_adam, "
              "_fused_adam)", None, "github.com/pytorch/pytorch/blob/v2.13.0/torch/optim/adam.py", "code"),
    _transformers_file("transformers-llama", "models/llama/modeling_llama.py"),
    _transformers_file("transformers-gpt2", "models/gpt2/modeling_gpt2.py"),
    _paper("shazeer-2018", "Shazeer & Stern 2018 (Adafactor)", "N. Shazeer, M. Stern", "Adafactor: Adaptive Learning "
           "Rates with Sublinear Memory Cost", 2018, "1804.04235", "ICML 2018"),
    Reference("pytorch-autocast", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: aten/src/ATen/autocast_mode.cpp "
              "(the lower-precision and fp32 op lists of CUDA and CPU autocast; cached_cast)", None,
              "github.com/pytorch/pytorch/blob/v2.13.0/aten/src/ATen/autocast_mode.cpp", "code"),
    Reference("pytorch-adafactor", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: torch/optim/_adafactor.py (Adafactor."
              "_init_group: row_var, col_var, variance)", None,
              "github.com/pytorch/pytorch/blob/v2.13.0/torch/optim/_adafactor.py", "code"),
    _transformers_file("transformers-adafactor", "optimization.py", "Adafactor"),
    Reference("pytorch-fsdp-offload", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: torch/distributed/fsdp/_fully_shard/"
              "_fsdp_api.py (CPUOffloadPolicy) and _fully_shard.py (fully_shard: reshard_after_forward, the root)",
              None, "github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/fsdp/_fully_shard/_fsdp_api.py", "code"),
    Reference("pytorch-fsdp2", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: torch/distributed/fsdp/_fully_shard/"
              "_fsdp_state.py (FSDPState._pre_forward: the group's unshard (all-gather) issued in its pre-forward; "
              "_root_post_backward_final_callback: the current stream waits on the last reduce-scatter)", None,
              "github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/fsdp/_fully_shard/_fsdp_state.py", "code"),
    Reference("torchtitan-parallelize", "torchtitan", "PyTorch", "torchtitan: torchtitan/models/llama3/infra/"
              "parallelize.py (apply_fsdp: fully_shard(tok_embeddings), each transformer block, [norm, output] with "
              "reshard_after_forward False, then the root)", None,
              "github.com/pytorch/torchtitan/blob/main/torchtitan/models/llama3/infra/parallelize.py", "code"),
    Reference("deepspeed-offload-config", "DeepSpeed", "Microsoft", "DeepSpeed: deepspeed/runtime/zero/"
              "offload_config.py (DeepSpeedZeroOffloadParamConfig: offload_param, valid only with stage 3)", None,
              "github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/zero/offload_config.py", "code"),
    _transformers_file("transformers-loss-utils", "loss/loss_utils.py", "ForCausalLMLoss"),
    Reference("megatron-fp16-optimizer", "Megatron-LM", _NV, "Megatron-LM: megatron/core/optimizer/optimizer.py "
              "(Float16OptimizerWithFloat16Params)", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/optimizer/optimizer.py", "code"),
    Reference("deepspeed-stage12-offload", "DeepSpeed", "Microsoft DeepSpeed", "DeepSpeed: deepspeed/runtime/zero/"
              "stage_1_and_2.py (cpu_offload: copy_grads_in_partition, async_accumulate_grad_in_cpu_via_gpu, "
              "async_inplace_copy_grad_to_fp32_buffer_from_gpu, param_buffer_of_bit16_for_cpu_offload_groups, step)",
              None, "github.com/deepspeedai/DeepSpeed/blob/edaa7221267243c7be7fb49c5d5f5c4fb97b4641/deepspeed/runtime/"
              "zero/stage_1_and_2.py", "code"),
    Reference("deepspeed-stage3-offload", "DeepSpeed", "Microsoft DeepSpeed", "DeepSpeed: deepspeed/runtime/zero/"
              "stage3.py (offload_optimizer: partition_grads, _offload_grad_partition_at_boundary, "
              "_reassign_or_swap_out_partitioned_parameters)", None,
              "github.com/deepspeedai/DeepSpeed/blob/edaa7221267243c7be7fb49c5d5f5c4fb97b4641/deepspeed/runtime/zero/"
              "stage3.py", "code"),
    Reference("deepspeed-engine-dtypes", "DeepSpeed", "Microsoft DeepSpeed", "DeepSpeed: deepspeed/runtime/engine.py "
              "(DeepSpeedEngine.get_data_types)", None, "github.com/deepspeedai/DeepSpeed/blob/"
              "38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/engine.py", "code"),
    Reference("deepspeed-cpu-adam", "DeepSpeed", "Microsoft DeepSpeed", "DeepSpeed: csrc/includes/cpu_adam.h "
              "(Adam_Optimizer::Step_AVX)", None, "github.com/deepspeedai/DeepSpeed/blob/"
              "38327e07f6cd39b63418f60cedd1651b0be3e7c3/csrc/includes/cpu_adam.h", "code"),
    Reference("nvidia-dgx-basepod-components", "NVIDIA DGX BasePOD", _NV, "NVIDIA DGX BasePOD reference architecture: "
              "Core Components", None, "docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-"
              "enterprise-ai/latest/core-components.html", "docs"),
    Reference("sth-xeon-8480-memory", "ServeTheHome", "ServeTheHome", "Intel Xeon Max 9480 deep-dive, p. 3: the Xeon "
              "Platinum 8480+ conceptual diagram", None, "servethehome.com/intel-xeon-max-9480-deep-dive-intel-has-64gb-"
              "hbm2e-onboard-like-a-gpu-or-ai-accelerator/3/", "blog"),
    Reference("nvidia-dgx-h100-guide", "NVIDIA DGX H100 user guide", _NV, "NVIDIA DGX H100/H200 User Guide: "
              "Introduction to the NVIDIA DGX H100/H200 System", None,
              "docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html", "docs"),
    _paper("liu-2023-ring-attention", "Liu et al. 2023 (Ring Attention)", "H. Liu, M. Zaharia, P. Abbeel",
           "Ring Attention with Blockwise Transformers for Near-Infinite Context", 2023, "2310.01889", "ICLR 2024"),
    Reference("megatron-core-context-parallel", "Megatron Core docs", _NV, "Megatron Core user guide: context "
              "parallelism package (ring of K/V chunks over the cp ranks, overlapped with attention; each rank "
              "holds two of 2 cp sequence chunks)", None,
              "docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/context_parallel.html", "docs"),
    Reference("megatron-distrib-optimizer", "Megatron-LM docs", _NV, "Megatron-LM: docs/source/distrib_optimizer.md "
              "(theoretical bytes per parameter: fp16 param and grads 20, 4 + 16/d distributed; 16-bit param, fp32 "
              "grads 18, 6 + 12/d; fp32 16, 8 + 8/d)", None,
              "github.com/NVIDIA/Megatron-LM/blob/40ce7c8/docs/source/distrib_optimizer.md", "docs"),
    Reference("megatron-optimizer-init", "Megatron-LM", _NV, "Megatron-LM: megatron/core/optimizer/__init__.py "
              "(get_megatron_optimizer: the distributed optimizer over intra_dp_cp_group, the data- and "
              "context-parallel ranks together)", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/optimizer/__init__.py", "code"),
    Reference("megatron-muon", "Megatron-LM", _NV, "Megatron-LM d7288711 (the commit Megatron-Bridge v0.4.0 pins as "
              "3rdparty/Megatron-LM): megatron/core/optimizer/muon.py (get_megatron_muon_optimizer: 2-D non-embedding "
              "parameters to TensorParallelMuon, the rest to Adam; 'muon with dist optimizer is not supported'; "
              "'muon with fp16 is not supported') and layer_wise_optimizer.py (LayerWiseDistributedOptimizer: whole "
              "parameters dealt to the data-parallel ranks by size, ping-pong; allgather_params after the step unless "
              "async_allgather)", None,
              "github.com/NVIDIA/Megatron-LM/blob/d7288711ba278d160d2a5a22c099915c9fe1395c/megatron/core/optimizer/"
              "muon.py", "code"),
    Reference("megatron-arguments-muon", "Megatron-LM", _NV, "Megatron-LM d7288711 (the commit Megatron-Bridge "
              "v0.4.0 pins): megatron/training/arguments.py L1478-1479 (validate_args: if args.optimizer == 'muon': 'Muon "
              "optimizer does not support overlap grad reduce. Use dist_muon instead.')", None,
              "github.com/NVIDIA/Megatron-LM/blob/d7288711ba278d160d2a5a22c099915c9fe1395c/megatron/training/"
              "arguments.py#L1479", "code"),
    Reference("megatron-language-module", "Megatron-LM", _NV, "Megatron-LM: megatron/core/models/common/"
              "language_module/language_module.py (is_embedding_or_output_parameter on the word embeddings and the "
              "output layer)", None, "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/models/common/"
              "language_module/language_module.py", "code"),
    Reference("emerging-optimizers-muon", "Emerging-Optimizers", _NV, "NVIDIA-NeMo Emerging-Optimizers: "
              "emerging_optimizers/orthogonalized_optimizers/muon_utils.py (newton_schulz: transposed so the Gram "
              "matrix is the smaller; under fp32 matmul precision 'medium' the iterate cast to bf16; "
              "newton_schulz_step: A = X X^T, B = addmm(A, A, A), X = addmm(X, B, X); the quintic coefficient sets) and "
              "orthogonalized_optimizer.py (OrthogonalizedOptimizer.step: decoupled weight decay, momentum lerp_, "
              "Nesterov lerp, orthogonalize, p.add_)", None,
              "github.com/NVIDIA-NeMo/Emerging-Optimizers/blob/main/emerging_optimizers/orthogonalized_optimizers/"
              "muon_utils.py", "code"),
    Reference("bridge-kimi-k2", "Megatron-Bridge", _NV, "Megatron-Bridge v0.4.0: src/megatron/bridge/recipes/kimi/"
              "kimi_k2.py (Muon: use_distributed_optimizer False, overlap_param_gather False, grad_reduce_in_fp32 True, "
              "fp32 main params and grads) and recipes/utils/optimizer_utils.py (distributed_muon_with_cosine_annealing: "
              "dist_muon, momentum 0.95, Nesterov, spectral scale, fp32_matmul_prec medium, 5 Newton-Schulz steps, "
              "tp mode blockwise, Adam for the rest)", None,
              "github.com/NVIDIA-NeMo/Megatron-Bridge/blob/v0.4.0/src/megatron/bridge/recipes/kimi/kimi_k2.py", "code"),
    Reference("megatron-distrib-optimizer-code", "Megatron-LM", _NV, "Megatron-LM core_v0.15.0 (0d7e02bd): "
              "megatron/core/optimizer/distrib_optimizer.py (_build_model_and_main_param_groups: main params held by "
              "FusedAdam under the precision-aware optimizer; _copy_model_grads_to_main_grads: decoupled_grad = the "
              "buffer's shard, else main_grad.float()), optimizer_config.py (store_param_remainders True, "
              "use_precision_aware_optimizer_no_fp8_or_ds_fp8)", None,
              "github.com/NVIDIA/Megatron-LM/blob/core_v0.15.0/megatron/core/optimizer/distrib_optimizer.py", "code"),
    Reference("te-fused-adam", "Transformer Engine", _NV, "TransformerEngine v2.9 (70f53666): transformer_engine/"
              "pytorch/optimizers/fused_adam.py (FusedAdam: exp_avg_dtype, exp_avg_sq_dtype, master_weight_dtype, "
              "store_param_remainders; step unscales each state not in fp32 with .float() before the kernel), "
              "common/multi_tensor/adam.cu (AdamFunctorMaster, AdamFunctorMasterParamRemainder)", None,
              "github.com/NVIDIA/TransformerEngine/blob/v2.9/transformer_engine/pytorch/optimizers/fused_adam.py",
              "code"),
    Reference("te-cpu-offload", "Transformer Engine", _NV, "TransformerEngine v2.10+ (d0067d0d): transformer_engine/"
              "pytorch/cpu_offload.py (get_cpu_offload_context; DefaultOffloadSynchronizer: layers 0..N-1 offloaded, "
              "layer i's GPU copy released at layer l-N+i's forward and reloaded from layer l-1-N+i's backward, "
              "saved-activation peak (l - N) layers'); v2.7's v1 path (AsyncDoubleBufferGroupOffloadHandler, "
              "layer_window_map) spreads the N offloads over the l layers likewise", None,
              "github.com/NVIDIA/TransformerEngine/blob/v2.10/transformer_engine/pytorch/cpu_offload.py", "code"),
    Reference("megatron-schedules", "Megatron-LM", _NV, "Megatron-LM: megatron/core/pipeline_parallel/schedules.py "
              "(forward_backward_pipelining_with_interleaving, get_pp_rank_microbatches: num_warmup_microbatches = "
              "2(p - rank - 1) + (v - 1)p, capped at the m v chunk micro-batches; before commit 4295be1a6c, "
              "November 2024, all of them when m = p)", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/pipeline_parallel/schedules.py", "code"),
    Reference("megatron-pp-layout", "Megatron-LM", _NV, "Megatron-LM: megatron/core/transformer/"
              "pipeline_parallel_layer_layout.py (PipelineParallelLayerLayout: parse_str_to_list unrolls (...)*N and "
              "x*N and splits chunks at '|'; layout[vpp_rank * pp + pp_rank]; validate_layer_layout: embedding first "
              "and once, loss last and once, num_layers decoders, MTP after them) and docs/api-guide/"
              "pipeline_parallel_layout.md (DeepSeek-V3 on PP 16, VPP 2: 'Et*3|(tt|)*29,m|L')", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/transformer/pipeline_parallel_layer_layout.py",
              "code"),
    Reference("megatron-ddp", "Megatron-LM", _NV, "Megatron-LM: megatron/core/distributed/distributed_data_parallel.py "
              "(the gradient buffers: grad_dtype = torch.float if ddp_config.grad_reduce_in_fp32 else param.dtype)", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/distributed/distributed_data_parallel.py", "code"),
    Reference("megatron-param-buffer", "Megatron-LM", _NV, "Megatron-LM: megatron/core/distributed/"
              "param_and_grad_buffer.py (_ParamAndGradBucketGroup: register_grad_ready dispatches a bucket's "
              "reduce once its gradients are ready in the last micro-batch; finish_param_sync waits on a bucket's "
              "all-gather, then dispatches the next bucket's)", None,
              "github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/megatron/core/distributed/"
              "param_and_grad_buffer.py", "code"),
    Reference("megatron-fsdp", "Megatron-LM", _NV, "Megatron-LM: megatron/core/distributed/fsdp/src/megatron_fsdp/"
              "megatron_fsdp.py (the post-backward hook: grad_reduce_every_bprop for the sharding strategies "
              "'optim_grads' and 'optim_grads_params', a reduce-scatter after every micro-batch's backward)", None,
              "github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/megatron/core/distributed/"
              "fsdp/src/megatron_fsdp/megatron_fsdp.py", "code"),
    Reference("megatron-core-fsdp-adapter", "Megatron-LM", _NV, "Megatron-LM: megatron/core/distributed/fsdp/"
              "mcore_fsdp_adapter.py at 599fe927 (FullyShardedDataParallel.__init__: fsdp_unit_modules defaults to "
              "[TransformerLayer] under data_parallel_sharding_strategy 'optim_grads_params')", None,
              "github.com/NVIDIA/Megatron-LM/blob/599fe9275297bc25b1c55650936317fa245e34f0/megatron/core/distributed/"
              "fsdp/mcore_fsdp_adapter.py", "code"),
    Reference("megatron-fsdp-buffer", "Megatron-LM", _NV, "Megatron-LM: megatron/core/distributed/fsdp/src/"
              "megatron_fsdp/param_and_grad_buffer.py at 0d8e0714 (Megatron-Core 0.15, NeMo 25.11's): "
              "AllGatherPipeline.async_bucket_gather, GradReducePipeline._bucket_group_gradient_reduce", None,
              "github.com/NVIDIA/Megatron-LM/blob/0d8e0714/megatron/core/distributed/fsdp/src/megatron_fsdp/"
              "param_and_grad_buffer.py", "code"),
    Reference("pytorch-pipelining-stage", "PyTorch", "PyTorch", "PyTorch: torch/distributed/pipelining/stage.py "
              "(_PipelineStageBase.backward_maybe_with_nosync: an FSDP stage runs every micro-batch's backward with "
              "set_requires_gradient_sync(False) and set_reshard_after_backward(False), its gradients reduced once "
              "after the last)", None, "github.com/pytorch/pytorch/blob/0138610331c90b8053a0bfc6df0175b200a1cad2/torch/"
              "distributed/pipelining/stage.py", "code"),
    Reference("megatron-arguments", "Megatron-LM", _NV, "Megatron-LM: megatron/training/arguments.py "
              "(--context-parallel-size, --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers)",
              None, "github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/arguments.py", "code"),
    Reference("te-context-parallel", "Transformer Engine", _NV, "TransformerEngine: transformer_engine/pytorch/"
              "attention/dot_product_attention/context_parallel.py (AttnFuncWithCPAndKVP2P)", None,
              "github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/pytorch/attention/"
              "dot_product_attention/context_parallel.py", "code"),
    Reference("pytorch-context-parallel", "PyTorch tutorials", "PyTorch", "Introduction to Context Parallel "
              "(torch.distributed.tensor.experimental.context_parallel; torchtitan's 1M-token training)", None,
              "docs.pytorch.org/tutorials/prototype/context_parallel.html", "docs"),
    Reference("torchtitan-h100-benchmarks", "torchtitan", "PyTorch", "torchtitan: benchmarks/"
              "llama3_h100_202412_torchtitan.md (Llama 3.1 8B-405B on Grand Teton H100s, TPS/GPU, torchtitan 9dec370)",
              2024, "github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md", "docs"),
    Reference("torchtitan-a100-performance", "torchtitan", "PyTorch", "torchtitan: docs/performance.md (Llama 2 and 3 "
              "with FSDP2 on 64 A100 80GB, WPS and MFU)", 2024,
              "github.com/pytorch/torchtitan/blob/041336434916bdc0f88c1f89fda176fd3c2092e4/docs/performance.md", "docs"),
    Reference("torchtitan-llama3-8b-toml", "torchtitan", "PyTorch", "torchtitan: train_configs/llama3_8b.toml (the "
              "preset for 64 A100 GPUs: norm_type = 'rmsnorm', compile = false, selective op activation checkpointing)",
              None, "github.com/pytorch/torchtitan/blob/0011fb905e9561a51af0f265e35d989f7448b1d8/train_configs/"
              "llama3_8b.toml", "code"),
    Reference("torchtitan-norms", "torchtitan", "PyTorch", "torchtitan: torchtitan/models/norms.py (RMSNorm: "
              "self._norm(x.float()).type_as(x) * self.weight; FusedRMSNorm, a Triton kernel, only with "
              "norm_type = 'fused_rmsnorm')", None,
              "github.com/pytorch/torchtitan/blob/026e23a981dee27d41a8637baad651656698b6f8/torchtitan/models/norms.py",
              "code"),
    Reference("torchtitan-optimizer", "torchtitan", "PyTorch", "torchtitan: torchtitan/optimizer.py (AdamW with "
              "'fused': fused, 'foreach': not fused; optimizer.fused defaults to False)", None,
              "github.com/pytorch/torchtitan/blob/5cffd5ac430304f604fb4f171add4fdf61d1ef23/torchtitan/optimizer.py",
              "code"),
    Reference("deepspeed-pipe-engine", "DeepSpeed", "Microsoft", "DeepSpeed: deepspeed/runtime/pipe/engine.py "
              "(PipelineEngine: _exec_backward_pass calls the bf16 optimizer's update_hp_grads after each micro-batch; "
              "the schedule's ReduceTiedGrads and ReduceGrads after the last backward, the fp32 gradients all-reduced "
              "by buffered_allreduce_fallback under ZeRO 0-1)", None,
              "github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/pipe/engine.py", "code"),
    Reference("deepspeed-bf16-optimizer", "DeepSpeed", "Microsoft", "DeepSpeed: deepspeed/runtime/bf16_optimizer.py "
              "(BF16_Optimizer, written for BigScience's BLOOM: fp32 gradients of every parameter, update_hp_grads "
              "adds each 16-bit gradient into them)", None,
              "github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/bf16_optimizer.py", "code"),
    Reference("pytorch-fsdp2-collectives", "PyTorch 2.13", "PyTorch", "PyTorch 2.13: torch/distributed/fsdp/"
              "_fully_shard/_fsdp_collectives.py (foreach_all_gather_copy_out: split_with_sizes_copy of the gathered "
              "output; foreach_reduce: _chunk_cat of the gradients into the reduce-scatter input)", None,
              "github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
              "code"),
    Reference("llm-foundry-benchmarks", "llm-foundry", "MosaicML", "llm-foundry: scripts/train/benchmarking/README.md "
              "(MPT 760M-70B with FSDP FULL_SHARD and FlashAttention on 8-64 H100 80GB, BF16: throughput, MFU, HFU)",
              2023, "github.com/mosaicml/llm-foundry/blob/061f2c7ce64e655100286584a7629e2a09f827ba/scripts/train/benchmarking/README.md", "docs"),
    Reference("torchao-float8", "torchao 0.18", "PyTorch", "torchao 0.18.0: torchao/float8/float8_linear.py "
              "(matmul_with_hp_or_float8_args), config.py (Float8LinearConfig.from_recipe_name), float8_ops.py "
              "(preprocess_addmm, addmm_float8_unwrapped), float8_utils.py (tensor_to_amax, amax_to_scale)", None,
              "github.com/pytorch/ao/tree/v0.18.0/torchao/float8", "code"),
    Reference("torchtitan-float8", "torchtitan", "PyTorch", "torchtitan: the float8 converter's filter_fqns "
              "(\"nn.Linear modules with any dim size not divisible by 16 are always skipped\") and docs/float8.md",
              None, "github.com/pytorch/torchtitan/blob/main/docs/float8.md", "docs"),
    Reference("nccl-tuning", "NCCL", _NV, "NCCL: src/graph/tuning.cc (ncclTopoTuneModel, ncclTopoGetAlgoTime: the "
              "cost model NCCL picks its algorithm and protocol by)", None,
              "github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/tuning.cc", "code"),
    Reference("nccl-search", "NCCL", _NV, "NCCL: src/graph/search.cc (the topology search's per-channel speeds)", None,
              "github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/search.cc", "code"),
    Reference("nccl-topo", "NCCL", _NV, "NCCL: src/graph/topo.h (NVLink bandwidth per link by compute capability)",
              None, "github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/topo.h", "code"),
    Reference("nccl-tests-290", "NVIDIA/nccl-tests#290", "shahizat, AddyLaddy", "nccl-tests issue 290: single-node and "
              "multi-node performance of H100 nodes (a maintainer: 46-48 GB/s per NDR 400 Gb/s NIC)", 2025,
              "github.com/NVIDIA/nccl-tests/issues/290", "report"),
    Reference("nccl-tests-252", "NVIDIA/nccl-tests#252", "ismailguzel, AddyLaddy", "nccl-tests issue 252: all_reduce_perf "
              "on two nodes of 4 H100s with NCCL_ALGO=RING, bus bandwidth 93-97 GB/s from 512 MB to 8 GB (a maintainer: "
              "'~24GB/s per NIC')", 2024, "github.com/NVIDIA/nccl-tests/issues/252", "report"),
    Reference("nccl-tests-212", "NVIDIA/nccl-tests#212", "liminn, sjeaugey", "nccl-tests issue 212: H100 all-reduce "
              "performance (a maintainer: 450 GB/s line rate, an effective NVLink bandwidth of 370 GB/s)", 2024,
              "github.com/NVIDIA/nccl-tests/issues/212", "report"),
    Reference("nccl-tests-performance", "NCCL tests, performance notes", _NV, "nccl-tests: doc/PERFORMANCE.md", None,
              "github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md", "docs"),
    Reference("openxla-matmul-perf-table", "OpenXLA GEMM table", "OpenXLA", "XLA: xla/service/gpu/model/"
              "matmul_interpolator_data.h (kDefaultMatmulPTable: measured GEMM FLOP/s by device, dtype and (b, m, n, "
              "k), the table XLA's GPU cost model interpolates; read at ROCm/xla commit ea2c45f2ca, 'update matmul "
              "interpolator table')", None,
              "github.com/ROCm/xla/blob/ea2c45f2cacc930dcfa4e7bb0773616b8e353c34/xla/service/gpu/model/"
              "matmul_interpolator_data.h", "code"),
    Reference("te-fp8-casts", "Transformer Engine", _NV, "TransformerEngine d0067d0d: transformer_engine/pytorch/"
              "csrc/quantizer.cpp (Float8CurrentScalingQuantizer::quantize_impl: nvte_compute_amax, then "
              "nvte_quantize_v2; create_tensor: a transpose only where non-TN fp8 GEMMs are unsupported), "
              "csrc/extensions/normalization.cpp (rmsnorm_fwd: FULLY_FUSED norm + cast for delayed scaling, "
              "FUSED_NORM_AMAX_FP8 for current scaling, UNFUSED for MXFP8), common/normalization/rmsnorm/"
              "rmsnorm_api.cpp L100-104 (the fused norm's transpose, a kernel of its own), module/"
              "layernorm_linear.py L222-316 and module/linear.py (the input quantized row- and column-wise, "
              "row-wise only before a sequence-parallel all-gather), module/base.py grad_output_preprocess, "
              "distributed.py _all_gather_fp8 (the transpose made after the gather); Megatron-LM megatron/core/"
              "extensions/transformer_engine.py TELinear.forward (is_first_microbatch: the 8-bit weights cached "
              "across micro-batches)", None,
              "github.com/NVIDIA/TransformerEngine/blob/d0067d0da6cb01811b8072a7d304f0e00344ce2b/transformer_engine/"
              "pytorch/csrc/quantizer.cpp", "code"),
    Reference("te-sp-gathers", "Transformer Engine", _NV, "TransformerEngine v2.9 (70f5366): transformer_engine/"
              "pytorch/distributed.py (gather_along_first_dim; _all_gather_fp8 L903-984: the 8-bit _data gathered, "
              "no scale sent; _all_gather_mxfp8 L1445-1570: each usage's data and 1-byte scales per 32), module/"
              "linear.py (_Linear.forward L175-207, L344: the column-parallel input quantized on its shard and "
              "gathered row-wise, the row-parallel output reduce-scattered in 16 bits; _Linear.backward L569, "
              "L639-666, L735-744: the output gradient quantized row- and column-wise, the input re-gathered for the "
              "weight gradient behind the dgrad GEMM, the input gradient reduce-scattered in 16 bits), module/"
              "layernorm_linear.py L232-266, L646-676, module/base.py (grad_output_preprocess L1145-1192; "
              "initialize_ub L288-298, L412-416: under fp8 the userbuffers all-gather buffers are uint8), "
              "tensor/float8_tensor.py supports_only_rowwise_all_gather (symbolic.te_float8.SP_SOURCE)", None,
              "github.com/NVIDIA/TransformerEngine/blob/70f536662ae10a62a54f4ed1ba92e3314c5cfd69/transformer_engine/"
              "pytorch/distributed.py", "code"),
    Reference("te-fp8-delayed-amax", "Transformer Engine", _NV, "TransformerEngine v1.9: transformer_engine/pytorch/"
              "fp8.py (FP8GlobalStateManager.fp8_autocast_exit -> reduce_and_update_fp8_tensors(forward=True); "
              "reduce_tensor_across_group_op_max: torch.distributed.all_reduce(MAX, async_op=False)), module/linear.py "
              "(ctx.reduce_and_update_bwd_fp8_tensors where is_first_fp8_module(): reduce_and_update_fp8_tensors("
              "forward=False) at the end of its backward); common/recipe/__init__.py (DelayedScaling.reduce_amax = "
              "True); v2.4 fp8.py the same (a no-op for the other recipes: their global amax buffer is empty)", None,
              "github.com/NVIDIA/TransformerEngine/blob/v1.9/transformer_engine/pytorch/fp8.py", "code"),
    Reference("megatron-transformer-block", "Megatron-LM", _NV, "Megatron-LM: megatron/core/transformer/"
              "transformer_block.py (TransformerBlock.forward: one fp8_autocast(fp8_group=parallel_state."
              "get_amax_reduction_group(with_context_parallel=True)) around the chunk's layers, core_r0.8.0 on; "
              "today the outer context under the delayed recipe, per layer for the others)", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/transformer/transformer_block.py", "code"),
    Reference("megatron-parallel-state", "Megatron-LM", _NV, "Megatron-LM: megatron/core/parallel_state.py "
              "(get_amax_reduction_group: _TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP from 120300178d, 2023-05-19; "
              "_TENSOR_AND_CONTEXT_PARALLEL_GROUP in core_r0.8.0, after 2e429097dd, 2024-07-25; reverted by "
              "98abe37866, 2024-09-06, core_r0.9.0 on; tp_only_amax_red: the tensor and context ranks); NeMo Framework "
              "user guide 24.09, Software Component Versions: NeMo 24.07 ran Megatron Core 0.8, 24.09 0.9.0", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/parallel_state.py", "code"),
    Reference("te-sp-amax", "Transformer Engine", _NV, "TransformerEngine v2.2-v2.17: transformer_engine/pytorch/"
              "module/linear.py and layernorm_linear.py (_customize_quantizers_float8_current_scaling, from v2.8 "
              "_customize_quantizers_nvfp4: with sequence parallelism a column-parallel module's input quantizer and "
              "a row-parallel linear's grad_output quantizer get with_amax_reduction, amax_reduction_group tp_group; "
              "v2.18 the same through set_quantizer_amax_reduction_group), csrc/quantizer.cpp "
              "(Float8CurrentScalingQuantizer::quantize_impl: amax_reduction_group->allreduce(MAX)->wait() before the "
              "scale and the cast)", None,
              "github.com/NVIDIA/TransformerEngine/blob/v2.13/transformer_engine/pytorch/module/linear.py", "code"),
    Reference("nemo-userbuffers", "NeMo", _NV, "NeMo: nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py "
              "(the per-model userbuffers configs: the fp8 H100 ones set fp8_buf=True on proj_fprop, and on fc2_fprop "
              "where it is pipelined, the reduce-scatters of the row-parallel outputs, e.g. "
              "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192)",
              None, "github.com/NVIDIA/NeMo/blob/26005325d0cf22928521593fd68e9f8c7be24ec0/nemo/collections/llm/recipes/"
              "tp_overlap_configs/userbuffers.py", "code"),
    Reference("te-userbuffers", "Transformer Engine", _NV, "TransformerEngine: transformer_engine/pytorch/module/"
              "base.py (initialize_ub: communication-GEMM overlap per layer, ring exchange for the sequence-parallel "
              "all-gathers, the GEMM split into tp chunks for the reduce-scatters), enabled by Megatron-LM's "
              "--tp-comm-overlap (megatron/training/arguments.py: only with sequence parallelism)", None,
              "github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/pytorch/module/base.py", "code"),
    Reference("te-comm-gemm-overlap", "Transformer Engine", _NV, "TransformerEngine v2.9: transformer_engine/common/"
              "comm_gemm_overlap/comm_gemm_overlap.cpp (CommOverlapCore: _math_sms = set_sm_margin ? sm_count - "
              "num_comm_sm : sm_count; every overlapped GEMM, bulk, pipelined or ring-exchanged, launched on "
              "_math_sms; CommOverlapP2PBase::split_overlap_ag and split_overlap_rs one nvte_cublas_gemm per tp "
              "chunk of the tokens, CommOverlapBase::split_overlap_rs one per num_splits chunk of the weight's "
              "output rows, as read at 015939ab)", None, "github.com/NVIDIA/TransformerEngine/blob/release_v2.9/transformer_engine/common/"
              "comm_gemm_overlap/comm_gemm_overlap.cpp", "code"),
    Reference("megatron-bridge-comm-overlap", "Megatron-Bridge", _NV, "Megatron-Bridge v0.2.0 (v0.3.0 the same): "
              "src/megatron/bridge/training/comm_overlap.py (the userbuffers_* TransformerLayerTPOverlapCfg configs: "
              "num_sm and set_sm_margin per GEMM), selected by scripts/performance/configs/llama3/"
              "llama3_llm_pretrain.py and llama31/llama31_llm_pretrain.py (v0.3.0: configs/llama/): comm_overlap_cfg",
              None, "github.com/NVIDIA-NeMo/Megatron-Bridge/blob/v0.2.0/src/megatron/bridge/training/comm_overlap.py",
              "code"),
    Reference("nemo-launcher-tp-overlap", "NeMo-Framework-Launcher", _NV, "NeMo-Framework-Launcher at tag 24.07 "
              "(8325688d): launcher_scripts/conf/training/tp_overlap/ub_cfg_h100_*.yaml (userbuffers configs per "
              "GEMM: method, num_sm, set_sm_margin), each selected by a model yaml's defaults list (conf/training/"
              "*/*.yaml L3: optional tp_overlap@model.ub_tp_comm_overlap_cfg: <name>)", None,
              "github.com/NVIDIA/NeMo-Framework-Launcher/tree/24.07/launcher_scripts/conf/training/tp_overlap", "code"),
    Reference("dgxc-gpt3-175b-hydra", "DGX Cloud Benchmarking", _NV, "NVIDIA/dgxc-benchmarking v25.01 "
              "(143b90dd91f9; v24.11.1 35a9aecc8d5b and v25.02 8f5cbb3799ea the same there): nemo_megatron/"
              "gpt3_175b_hydra.yaml, the GPT-3 175B config configure.sh passes NeMo (--config-name=gpt3_"
              "${MODEL_SIZE}_hydra.yaml), L176-220 its inline userbuffers config (model.ub_tp_comm_overlap_cfg: "
              "method, num_sm, set_sm_margin per GEMM)", None,
              "github.com/NVIDIA/dgxc-benchmarking/blob/143b90dd91f9be958fed4773ae95d941a3356a82/nemo_megatron/"
              "gpt3_175b_hydra.yaml", "code"),
    Reference("pytorch-micro-pipeline-tp", "PyTorch", "PyTorch", "PyTorch: torch/_inductor/fx_passes/"
              "micro_pipeline_tp.py (fuse_all_gather_matmul: an all-gather fused with the matmuls and _scaled_mm's "
              "whose left operand it is; fuse_matmul_reduce_scatter: a reduce-scatter fused with its producer "
              "matmul; torch.ops.symm_mem.fused_all_gather_scaled_matmul, fused_scaled_matmul_reduce_scatter), "
              "torchtitan's AsyncTP (experimental.enable_async_tensor_parallel)", None,
              "github.com/pytorch/pytorch/blob/main/torch/_inductor/fx_passes/micro_pipeline_tp.py", "code"),
    Reference("megatron-bridge-nemotron-h", "Megatron-Bridge", _NV, "Megatron-Bridge v0.3.1: src/megatron/bridge/"
              "models/nemotronh/nemotron_h_provider.py (NemotronHModelProvider L30-56; Nemotron3NanoProvider L153-172: "
              "the hybrid pattern, hidden 2,688, 64 Mamba heads of 64 in 8 groups, state 128, 32 attention heads over "
              "2 query groups of 128, 128 experts of 1,856, top 6, a shared expert of 3,712)", None,
              "github.com/NVIDIA-NeMo/Megatron-Bridge/blob/v0.3.1/src/megatron/bridge/models/nemotronh/"
              "nemotron_h_provider.py", "code"),
    Reference("megatron-bridge-performance", "Megatron-Bridge", _NV, "Megatron-Bridge: docs/performance-summary.md "
              "(pre-training throughput by system, model, precision and layout: tokens/s and model TFLOP/s per GPU)",
              None, "github.com/NVIDIA-NeMo/Megatron-Bridge/blob/00b7660be0254ac6f95f44164ddd0c3e9cc798ed/docs/"
              "performance-summary.md", "docs"),
    Reference("nemo-automodel-performance", "NeMo AutoModel", _NV, "NeMo AutoModel: docs/performance-summary.md "
              "(pre-training on DGX-H100, BF16, FSDP2 with expert parallelism, TE + DeepEP, fake balanced gate: time "
              "per global step, tokens/s and model TFLOP/s per GPU; last updated 2025-10-02) and the benchmark configs "
              "examples/benchmark/configs/*_te_deepep.yaml", None,
              "github.com/NVIDIA-NeMo/Automodel/blob/01926a5c443b7979463c73341bf64adf79de638e/docs/"
              "performance-summary.md", "docs"),
    Reference("deepep-v1", "DeepEP V1", "DeepSeek-AI", "DeepEP: docs/legacy.md (V1 performance: normal kernels "
              "on H800, '~160 GB/s NVLink maximum bandwidth', intranode EP 8 dispatch 153 GB/s and combine 158 GB/s "
              "over NVLink)", None, "github.com/deepseek-ai/DeepEP/blob/0297fc801788b14b338a46554faca28d419e518a/"
              "docs/legacy.md", "code"),
    Reference("deepep", "DeepEP", "DeepSeek-AI", "DeepEP: deep_ep/buffer.py (get_dispatch_layout: "
              "num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank: a token goes once to each GPU, and "
              "across nodes once over RDMA to each node, that holds one of its experts; the normal internode kernels "
              "forward it over NVLink there, README 'asymmetric-domain bandwidth forwarding')", None,
              "github.com/deepseek-ai/DeepEP/blob/main/deep_ep/buffer.py", "code"),
    Reference("megatron-moe-readme", "Megatron-Core MoE README", _NV, "Megatron-LM: megatron/core/transformer/moe/"
              "README.md (MCore v0.8: 'Mixtral 8X7B bf16 training to achieve 438 TFLOPS'; Reference Best Parallel "
              "Mapping: 64 H100 80GB, 8 per node on NVLink 4, 8x400 Gbit/s InfiniBand, TE v1.9) and megatron/training/"
              "training.py num_floating_point_operations (the throughput's FLOP count)", None,
              "github.com/NVIDIA/Megatron-LM/blob/core_r0.8.0/megatron/core/transformer/moe/README.md", "code"),
    Reference("megatron-dsv3-gb200", "Megatron-LM", _NV, "Megatron-LM: docs/discussions/deepseek-v3-gb200-"
              "optimization/deepseek-v3-gb200-optimization.md (DeepSeek-V3 on 256 GB200 from 494 to 970 TFLOP/s per GPU: "
              "'large gaps between kernels ... CPU overhead or host boundedness'; CUDA graphs +84.8 TFLOP/s, CPU binding "
              "+70.6; the device-host sync for the tokens per expert left)", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/docs/discussions/deepseek-v3-gb200-optimization/"
              "deepseek-v3-gb200-optimization.md", "code"),
    Reference("megatron-core-0.15-experts", "Megatron-Core", _NV, "Megatron-LM core_v0.15.0 (0d7e02bd): "
              "megatron/core/transformer/moe/experts.py (TEGroupedMLP: fc1 skip_bias_add=False, fc2 skip_bias_add="
              "True; forward's bias_act_func: weighted_bias_quick_geglu_impl under bias_activation_fusion; "
              "_apply_bias: per local expert t + b * p, torch.cat) and megatron/core/fusions/fused_bias_geglu.py "
              "(weighted_bias_quick_geglu_impl: chunk, clamp, clamp, torch.cat eager before "
              "WeightedQuickGeGLUFunction); Megatron-Bridge v0.2.0 src/megatron/bridge/models/gpt_oss/"
              "gpt_oss_provider.py (GPTOSSProvider: quick_gelu, glu_linear_offset 1.0, bias_activation_fusion True, "
              "activation_func_clamp_value 7.0)", None,
              "github.com/NVIDIA/Megatron-LM/blob/core_v0.15.0/megatron/core/transformer/moe/experts.py", "code"),
    Reference("transformer-engine-2.9-grouped-linear", "Transformer Engine", _NV, "TransformerEngine v2.9 (70f53666): "
              "transformer_engine/pytorch/module/grouped_linear.py (_GroupedLinear.forward: general_grouped_gemm "
              "with bias; backward without fp8: 'Grad bias is fused with wgrad GEMM')", None,
              "github.com/NVIDIA/TransformerEngine/blob/v2.9/transformer_engine/pytorch/module/grouped_linear.py",
              "code"),
    Reference("megatron-core-a2a-overlap", "Megatron-Core", _NV, "Megatron-LM 0d8e0714 (Megatron-Bridge v0.2.0's "
              "3rdparty/Megatron-LM): megatron/core/pipeline_parallel/"
              "combined_1f1b.py (combined_1f1b_schedule_for_no_pipelining: the first forward alone, micro-batch i's "
              "backward beside i + 1's forward, the last backward alone; combined_1f1b_schedule_for_interleaved_"
              "pipelining: the steady 1F1B phase's forward and backward merged), megatron/core/models/common/"
              "model_chunk_schedule_plan.py (TransformerLayerSchedulePlan.run L176-237: comm stream combine_bwd | dispatch_fwd, "
              "dispatch_bwd | combine_fwd beside comp stream attn_fwd | mlp_bwd, mlp_fwd | attn_bwd, one event per "
              "micro-batch), megatron/core/pipeline_parallel/schedules.py (get_pp_rank_microbatches L730-734: one more "
              "warmup micro-batch under the overlap), megatron/core/transformer/transformer_config.py (__post_init__ "
              "L1665-1701: ep > 1, "
              "alltoall or flex dispatcher, virtual_pipeline_model_parallel_size where pp > 1, no full recompute; "
              "delay_wgrad_compute only with the overlap); Megatron-Bridge v0.2.0's recipes set it as "
              "moe_a2a_overlap (scripts/performance/utils/helpers.py L182-185: with delay_wgrad_compute)", None,
              "github.com/NVIDIA/Megatron-LM/blob/0d8e0714cd29c01e164fe6de9f532182bdffa942/megatron/core/"
              "pipeline_parallel/combined_1f1b.py", "code"),
    Reference("megatron-mamba-mixer", "Megatron-Core", _NV, "Megatron-LM: megatron/core/ssm/mamba_mixer.py (MambaMixer: "
              "in_proj column-parallel, the memory-efficient training path _ssm_training through mamba_ssm's "
              "mamba_split_conv1d_scan_combined, ExtendedRMSNorm over groups, out_proj row-parallel)", None,
              "github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/megatron/core/ssm/"
              "mamba_mixer.py", "code"),
    Reference("mamba-ssm-ssd", "mamba_ssm", "T. Dao, A. Gu", "mamba_ssm: mamba_ssm/ops/triton/ssd_combined.py "
              "(the chunked scan's Triton kernels and MambaSplitConv1dScanCombinedFn) and ops/triton/layernorm_gated.py "
              "(the gated RMSNorm)", None, "github.com/state-spaces/mamba/blob/e9594ce/mamba_ssm/ops/triton/"
              "ssd_combined.py", "code"),
    Reference("megatron-moe-dispatcher", "Megatron-Core", _NV, "Megatron-LM: megatron/core/transformer/moe/"
              "token_dispatcher.py (MoEAlltoAllTokenDispatcher: tokens permuted per expert, one copy per routed "
              "expert, all-to-all over the expert-parallel group; combine in reverse) and megatron/core/"
              "parallel_state.py (the expert grid's rank order tp-ep-dp-pp, expert tensor parallel size = tp)", None,
              "github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/transformer/moe/token_dispatcher.py", "code"),
    Reference("openxla-collective-perf-table", "OpenXLA collective table", "OpenXLA", "XLA: xla/service/gpu/model/"
              "default_collective_perf_table.txtpb (measured collective throughput by device, opcode, group and "
              "size, generated by xla/tools/collective_perf_table_gen)", None,
              "github.com/ROCm/xla/blob/ad6eaee1b2/xla/service/gpu/model/default_collective_perf_table.txtpb", "code"),
    Reference("bekman-mamf", "Bekman, ml-engineering", "S. Bekman", "Machine Learning Engineering Open Book: "
              "compute/accelerator/README.md, Maximum Achievable Matmul FLOPS comparison table (BF16 and FP8, "
              "mamf-finder.py: best of a brute-force shape search, mean of 100 iterations), master at 744d01e", None,
              "github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/compute/accelerator/"
              "README.md", "docs"),
    Reference("bekman-network", "Bekman, ml-engineering (network)", "S. Bekman", "Machine Learning Engineering Open "
              "Book: network/README.md, intra-node networking tables (NVLink generations and the GPUs on each; AMD "
              "XGMI peer-to-peer and all-to-all), master at 744d01e", None,
              "github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md", "docs"),
    Reference("azure-ai-benchmarking-guide", "Azure AI benchmarking guide", "Microsoft Azure HPC", "AI-benchmarking-"
              "guide: Azure_Results/ND_A100_v4_results.md, ND_H200_v5_results.md and ND_H100_v5_results.md (the last "
              "as its forks keep it, e.g. samuel-bohman/AI-benchmarking-guide) (HBM Bandwidth: BabelStream Copy, Mul, "
              "Add, Triad, Dot in TB/s; GEMM cuBLASLt; NCCL all-reduce)", None,
              "github.com/Azure/AI-benchmarking-guide/tree/main/Azure_Results", "code"),
    Reference("deepgemm-348", "deepseek-ai/DeepGEMM#348", "z52527", "DeepGEMM pull request 348: support mxfp4 x "
              "mxfp4 GEMM on sm100 (Dense GEMM perf on a B200, CUDA 12.9, beside cublasTest 13.3 run directly: "
              "TFLOP/s per M x N x K)", 2026, "github.com/deepseek-ai/DeepGEMM/pull/348", "report"),
    Reference("tritonbench-launch-overhead", "meta-pytorch/tritonbench#1017", "tissue3", "tritonbench pull "
              "request 1017: profile inductor launch overhead and add per-kernel benchmark (per-kernel host cost on a "
              "GB200: cuLaunchKernel alone 3.0 us with 0 arguments, 3.3 us with 19; Triton's binder 4.7 / 5.6 us; "
              "Inductor's CachingAutotuner.run 6.8 / 9.1 us)", 2026, "github.com/meta-pytorch/tritonbench/pull/1017",
              "report"),
    Reference("te-grace-cpu-overhead", "NVIDIA/TransformerEngine#2053", "Marks101", "Transformer Engine issue 2053: "
              "[PyTorch] High CPU overhead on Grace systems (host CPU time per Linear forward, BF16, hidden 2,048, "
              "8,192 tokens: torch.nn.Linear 37.08 us on GB200, 33.17 on GH200, 13.48 on a DGX H100's Xeon Platinum "
              "8480C; te.Linear 99.66 on GB200, 90.53 on GH200)", 2025,
              "github.com/NVIDIA/TransformerEngine/issues/2053", "report"),
    Reference("bekman-msmf", "Bekman, ml-engineering (MSMF)", "S. Bekman", "Machine Learning Engineering Open Book, "
              "commit 082816f (branch fast-mamf, 2026-08-10, 'faster mamf, plus msmf'): compute/accelerator/README.md, "
              "MAMF and MSMF comparison table, and benchmarks/README.md (mamf-finder.py --search auto: MSMF, the best "
              "rate a shape holds once the GPU is saturated at its power limit after a thermal soak; MAMF, a short "
              "burst at the boost clock)", None,
              "github.com/stas00/ml-engineering/blob/082816f9be8aeb6b65b074c33cb354a7ca1e7087/compute/accelerator/"
              "README.md", "docs"),
)

#: Every cited work by key, in the order above (by topic).
REFERENCES: Mapping[str, Reference] = MappingProxyType({r.key: r for r in _ENTRIES})
if len(REFERENCES) != len(_ENTRIES):  # pragma: no cover - a duplicated key is a typo in the table
    raise ValueError("duplicate reference key")


def reference(key: str) -> Reference:
    """The entry of ``key``; ``UnknownReference`` (one line, with the nearest keys) otherwise."""
    if key in REFERENCES:
        return REFERENCES[key]
    near = difflib.get_close_matches(key, REFERENCES, n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    raise UnknownReference(f"no reference {key!r}; memderive references lists the keys{hint}")


def cite(citation: Citation, keyed: bool = False) -> str:
    """A citation written out, one work after another (``; ``): label, place (or ``[key]`` when ``keyed``,
    for documents whose References section gives the place), locus."""
    out = []
    for part in citation.parts():
        ref = reference(part.key)
        head = f"{ref.label} [{ref.key}]" if keyed else f"{ref.label}, {ref.where}"
        out.append(", ".join(x for x in (head, part.locus) if x))
    return "; ".join(out)


def cited(citations: Iterable[Citation | None]) -> tuple[Reference, ...]:
    """The entries ``citations`` name, each once, in order of first citation."""
    keys = dict.fromkeys(k for c in citations if c is not None for k in c.keys())
    return tuple(reference(k) for k in keys)
