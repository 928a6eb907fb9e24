/**
 * The one error type. Every failure the user can cause carries a code, the
 * document and container it is about, a position in the input stream where
 * one is known, and the fix.
 */

export type ErrorCode =
  | 'BAD_ENCODING'
  | 'YAML_SYNTAX'
  | 'UNKNOWN_START'
  | 'BAD_UTILIZATION'
  | 'UNREADABLE_UTILIZATION'
  | 'BAD_ANNOTATION'
  | 'BAD_CONTAINER'
  | 'UNSUPPORTED_LAYOUT'
  | 'NESTING_TOO_DEEP'
  | 'UNSAFE_EDIT'
  | 'BAD_OPTION'
  | 'BAD_CONFIG'
  | 'USAGE'
  | 'IO'
  | 'KUBECONFIG'
  | 'KUBERNETES_API'
  | 'CANNOT_VERIFY'
  | 'INTERNAL';

/** 1-based line and column in the whole input stream. */
export interface SourcePosition {
  line: number;
  col: number;
}

/** How a user finds a document again: what Helm, kubectl and Argo CD show. */
export interface DocumentRef {
  /** 1-based position of the document in the stream. */
  index: number;
  /** 1-based line of the document's first line in the stream; 0 for an object that is not part of a stream (a pod at admission). */
  line: number;
  kind?: string;
  name?: string;
  /** Helm's `# Source: <chart path>` comment. */
  source?: string;
  /** Helm 4's postrenderer.helm.sh/postrender-filename annotation. */
  helmFilename?: string;
}

export interface ErrorDetails {
  document?: DocumentRef;
  container?: string;
  image?: string;
  position?: SourcePosition;
  fix?: string;
}

export class PreflightError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}) {
    super(message);
    this.name = 'PreflightError';
    this.code = code;
    this.details = details;
  }

  /** The message printed on stderr and into the diagnostics file. */
  format(): string {
    const { document, container, image, position, fix } = this.details;
    const where: string[] = [];
    if (document) where.push(describeDocument(document));
    if (container !== undefined) where.push(`container "${container}"`);
    if (image !== undefined) where.push(`image "${image}"`);
    if (position) where.push(`line ${position.line}, column ${position.col}`);
    const lines = [`error ${this.code}: ${escapeControl(`${where.length ? `${where.join(', ')}: ` : ''}${this.message}`)}`];
    // A fix's own line breaks are its layout; anything else it quotes from the input is escaped.
    if (fix) lines.push(`  fix: ${fix.split('\n').map(escapeControl).join('\n       ')}`);
    return lines.join('\n');
  }
}

export function describeDocument(doc: DocumentRef): string {
  const named = Boolean(doc.kind || doc.name);
  const id = named ? `${doc.kind ?? '?'}/${doc.name ?? '?'}` : `document ${doc.index}`;
  const origin = doc.source ?? doc.helmFilename;
  if (origin) return `${id} (${origin})`;
  // An object that is not part of a stream (a pod at admission) has no line.
  if (doc.line <= 0) return id;
  return named ? `${id} (document ${doc.index}, line ${doc.line})` : `${id} (line ${doc.line})`;
}

/**
 * Text from the input as it may be printed on a terminal or in a log: C0
 * controls (line breaks and tabs too), DEL, C1 controls and the Unicode line
 * separators become escapes (`\n`, `\t`, `\r`, `\x1b`, `\x7f`, `\x9b`,
 * `\u2028`), so that an image or name from a manifest can neither move the
 * cursor, clear the screen nor forge a line of its own. Every message passes
 * through it (PreflightError.format, the CLI's warnings), not each quote.
 */
export function escapeControl(text: string): string {
  return text.replace(CONTROL, escapeOne);
}

const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;
const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

function escapeOne(char: string): string {
  const code = char.charCodeAt(0);
  return NAMED[char] ?? (code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`);
}

/**
 * Text that may quote a URL with a user and password in it
 * (`http://admin:pass@proxy:3128`, a kubeconfig's server, HTTPS_PROXY), with
 * them taken out before it is printed, as Go's URL.Redacted does for kubectl:
 * the password becomes `xxxxx`; a user without a password (which may be a
 * token itself) too. Works on text that is not a valid URL as well.
 */
export function redactUserinfo(text: string): string {
  return text.replace(/\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#"']*)@/gi, (_whole, scheme: string, userinfo: string) => {
    const colon = userinfo.indexOf(':');
    return `${scheme}${colon === -1 ? 'xxxxx' : `${userinfo.slice(0, colon)}:xxxxx`}@`;
  });
}
