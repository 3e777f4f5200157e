"""The real notebooks bench_notebooks runs: public tutorials from pinned PyPI source releases.

Nothing third-party is committed. The first run downloads each pinned sdist by package name
through the registry's Simple API (`pypi-simple`), checks its SHA-256 against the one pinned
here, and unpacks only the chosen examples into benchmarks/.work/notebook_sources (git-ignored);
later runs reuse them. `pip download --no-binary :all:` is not used: pip has to prepare an
sdist's metadata, and matplotlib and scikit-learn build theirs with meson-python, which means
compiling the whole package first.

Each example is a sphinx-gallery script; its cells are the blocks between `# %%` lines (or
lines of 20+ `#`, the older marker), without the module docstring and the comment lines
that open a block (the tutorial's prose, which a notebook keeps in markdown cells). The
examples were chosen to run offline (bundled data sets or generated data, no `fetch_*`) and
in seconds each, on matplotlib and scikit-learn.
"""

from __future__ import annotations

import ast
import hashlib
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

WORK = Path(__file__).resolve().parent / ".work" / "notebook_sources"
_SEPARATOR = re.compile(r"^(# %%.*|#{20,}\s*)$")


@dataclass(frozen=True)
class Sdist:
    """One pinned source release on PyPI."""

    package: str
    version: str
    filename: str
    sha256: str

    @property
    def archive(self) -> Path:
        return WORK / self.filename

    @property
    def top(self) -> str:
        """The folder the archive unpacks into."""
        return self.filename.removesuffix(".tar.gz")


MATPLOTLIB = Sdist(
    "matplotlib",
    "3.11.2",
    "matplotlib-3.11.2.tar.gz",
    "cec596316640f2b394b8f0daa0ea61a8eae82d017b620b9f202befb972a59ea4",
)
SCIKIT_LEARN = Sdist(
    "scikit-learn",
    "1.9.1",
    "scikit_learn-1.9.1.tar.gz",
    "629cada3e33e2b9bf376cdc7614a47a4140b8aedc1d836579e359736fbd82977",
)


@dataclass(frozen=True)
class NotebookSource:
    """One notebook: a tutorial, or a long session of several run one after another in one
    kernel (a gallery folder worked through); where it comes from and its short name."""

    name: str
    sdist: Sdist
    path: str  # inside the sdist: the one script, or the folder of a session's scripts
    session: tuple[str, ...] = ()  # a session's scripts (file names in `path`), in order

    @property
    def scripts(self) -> list[Path]:
        folder = WORK / self.sdist.top / self.path
        return [folder / name for name in self.session] if self.session else [folder]

    @property
    def members(self) -> list[str]:
        """The archive members this notebook is made of."""
        inside = [f"{self.path}/{name}" for name in self.session] if self.session else [self.path]
        return [f"{self.sdist.top}/{member}" for member in inside]

    @property
    def origin(self) -> str:
        where = f"{self.sdist.package} {self.sdist.version} `{self.path}`"
        return f"{where}, {len(self.session)} examples in turn" if self.session else where


def _scripts(names: str, prefix: str = "plot_") -> tuple[str, ...]:
    """sphinx-gallery file names from their stems (`prefix` is added after any folder)."""
    return tuple(
        f"{folder}{prefix}{stem}.py"
        for folder, stem in (
            (name.rpartition("/")[0] + "/" if "/" in name else "", name.rpartition("/")[2])
            for name in names.split()
        )
    )


NOTEBOOKS = [
    NotebookSource("mpl-pyplot", MATPLOTLIB, "galleries/tutorials/pyplot.py"),
    NotebookSource("mpl-quick-start", MATPLOTLIB, "galleries/users_explain/quick_start.py"),
    NotebookSource("mpl-lifecycle", MATPLOTLIB, "galleries/tutorials/lifecycle.py"),
    NotebookSource(
        "mpl-colormap-manipulation",
        MATPLOTLIB,
        "galleries/users_explain/colors/colormap-manipulation.py",
    ),
    NotebookSource("mpl-autoscale", MATPLOTLIB, "galleries/users_explain/axes/autoscale.py"),
    NotebookSource(
        "skl-lasso-model-selection",
        SCIKIT_LEARN,
        "examples/linear_model/plot_lasso_model_selection.py",
    ),
    NotebookSource(
        "skl-target-encoder-cv",
        SCIKIT_LEARN,
        "examples/preprocessing/plot_target_encoder_cross_val.py",
    ),
    NotebookSource("skl-roc", SCIKIT_LEARN, "examples/model_selection/plot_roc.py"),
    NotebookSource("skl-tree-regression", SCIKIT_LEARN, "examples/tree/plot_tree_regression.py"),
    NotebookSource(
        "skl-label-propagation-digits",
        SCIKIT_LEARN,
        "examples/semi_supervised/plot_label_propagation_digits.py",
    ),
    NotebookSource(
        "skl-kmeans-assumptions", SCIKIT_LEARN, "examples/cluster/plot_kmeans_assumptions.py"
    ),
    NotebookSource(
        "skl-pipeline-display", SCIKIT_LEARN, "examples/miscellaneous/plot_pipeline_display.py"
    ),
    # Long sessions (issue 25): a gallery folder worked through in one kernel, 50+ cells, 100+
    # variables, fitted models and every figure left open (the examples use n_jobs=1).
    NotebookSource(
        "skl-linear-models-session",
        SCIKIT_LEARN,
        "examples/linear_model",
        _scripts(
            "ard bayesian_ridge_curvefit lasso_and_elasticnet lasso_lars_ic logistic_path"
            " multi_task_lasso_support nnls ols_ridge polynomial_interpolation"
            " quantile_regression ridge_path theilsen huber_vs_ridge sgd_iris"
        ),
    ),
    NotebookSource(
        "skl-model-selection-session",
        SCIKIT_LEARN,
        "examples/model_selection",
        _scripts(
            "confusion_matrix cv_indices cv_predict det grid_search_digits likelihood_ratios"
            " precision_recall roc_crossval underfitting_overfitting"
            " successive_halving_iterations nested_cross_validation_iris"
        ),
    ),
    NotebookSource(
        "skl-gaussian-mixture-session",
        SCIKIT_LEARN,
        "examples",
        _scripts(
            "gaussian_process/gpr_noisy_targets gaussian_process/gpr_prior_posterior"
            " gaussian_process/gpr_noisy gaussian_process/compare_gpr_krr mixture/gmm_selection"
            " mixture/gmm_covariances mixture/gmm_pdf mixture/gmm mixture/gmm_init"
            " covariance/covariance_estimation covariance/lw_vs_oas"
        ),
    ),
    NotebookSource(
        "skl-ensemble-session",
        SCIKIT_LEARN,
        "examples/ensemble",
        _scripts(
            "adaboost_multiclass isolation_forest monotonic_constraints voting_decision_regions"
            " voting_regressor feature_transformation adaboost_regression"
            " random_forest_regression_multioutput random_forest_embedding adaboost_twoclass"
            " gradient_boosting_quantile"
        ),
    ),
    NotebookSource(
        "skl-clustering-session",
        SCIKIT_LEARN,
        "examples/cluster",
        _scripts(
            "affinity_propagation dbscan kmeans_digits mean_shift mini_batch_kmeans"
            " segmentation_toy ward_structured_vs_unstructured"
            " feature_agglomeration_vs_univariate_selection linkage_comparison hdbscan"
        ),
    ),
    NotebookSource(
        "mpl-statistics-session",
        MATPLOTLIB,
        "galleries/examples/statistics",
        _scripts(
            "boxplot boxplot_color boxplot_demo bxp confidence_ellipse curve_error_band"
            " errorbar errorbar_features errorbar_limits_simple errorbars_and_boxes hist"
            " histogram_bihistogram histogram_cumulative histogram_multihist"
            " histogram_normalization psd_demo violinplot xcorr_acorr_demo",
            prefix="",
        ),
    ),
]


class SourceError(RuntimeError):
    """A pinned sdist could not be had, or is not the pinned one."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(sdist: Sdist) -> Path:
    """The pinned archive on disk: downloaded once by name, its SHA-256 checked every time."""
    WORK.mkdir(parents=True, exist_ok=True)
    if not sdist.archive.exists():
        from pypi_simple import PyPISimple

        with PyPISimple() as client:
            page = client.get_project_page(sdist.package)
            matches = [p for p in page.packages if p.filename == sdist.filename]
            if not matches:
                raise SourceError(f"{sdist.filename} is not on the {sdist.package} project page")
            partial = sdist.archive.with_suffix(".part")
            client.download_package(matches[0], partial, verify=True)
            partial.replace(sdist.archive)
    actual = _sha256(sdist.archive)
    if actual != sdist.sha256:
        sdist.archive.unlink()
        raise SourceError(f"{sdist.filename}: sha256 {actual}, pinned {sdist.sha256}")
    return sdist.archive


def unpack(sources: list[NotebookSource]) -> None:
    """Extract the chosen scripts from their archives (each archive read once)."""
    wanted: dict[Sdist, set[str]] = {}
    for source in sources:
        for script, member in zip(source.scripts, source.members, strict=True):
            if not script.exists():
                wanted.setdefault(source.sdist, set()).add(member)
    for sdist, members in wanted.items():
        with tarfile.open(fetch(sdist)) as archive:
            found = [m for m in archive.getmembers() if m.name in members]
            if len(found) != len(members):
                missing = members - {m.name for m in found}
                raise SourceError(f"{sdist.filename} lacks {sorted(missing)}")
            archive.extractall(WORK, members=found, filter="data")


def cells(script: Path) -> list[str]:
    """The code cells of a sphinx-gallery script, in order."""
    text = script.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    first = tree.body[0] if tree.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
        and first.end_lineno is not None
    ):
        lines = [""] * first.end_lineno + lines[first.end_lineno :]  # the module docstring
    blocks: list[list[str]] = [[]]
    for line in lines:
        if _SEPARATOR.match(line):
            blocks.append([])
        else:
            blocks[-1].append(line)
    result = []
    for block in blocks:
        while block and (not block[0].strip() or block[0].startswith("#")):
            block = block[1:]  # the prose: a markdown cell in a notebook
        source = "\n".join(block).strip("\n")
        if ast.parse(source).body:  # not prose only
            result.append(source)
    return result


def prepare(sources: list[NotebookSource]) -> dict[str, list[str]]:
    """Every notebook's cells, fetching and unpacking what is missing."""
    unpack(sources)
    return {
        source.name: [cell for script in source.scripts for cell in cells(script)]
        for source in sources
    }


def clear() -> None:
    """Remove the downloaded archives and unpacked examples."""
    shutil.rmtree(WORK, ignore_errors=True)
