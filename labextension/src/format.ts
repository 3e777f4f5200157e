/**
 * How values read in the panel: sizes, ages, short ids, notebook names. Pure functions.
 */

/** 1536 -> "1.5 KiB"; 0 -> "0 B". */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) {
    return '?';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) {
    return `${value} B`;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** How long ago `then` was, at `now` (both ms): "just now", "5 min ago", "3 h ago", ... */
export function formatAge(then: number, now: number): string {
  const seconds = Math.max(0, Math.round((now - then) / 1000));
  if (seconds < 10) {
    return 'just now';
  }
  if (seconds < 60) {
    return `${seconds} s ago`;
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    return `${minutes} min ago`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 48) {
    return `${hours} h ago`;
  }
  return `${Math.floor(hours / 24)} d ago`;
}

/** The first 8 characters of an id, enough to tell checkpoints apart at a glance. */
export function shortId(id: string): string {
  return id.slice(0, 8);
}

/** "dir/analysis.ipynb" -> "analysis.ipynb". */
export function baseName(path: string): string {
  const parts = path.split('/').filter(part => part.length > 0);
  return parts.length > 0 ? parts[parts.length - 1] : path;
}

/** The label of a checkpoint: its name, else its short id. */
export function checkpointLabel(checkpoint: { name: string | null; checkpoint_id: string }): string {
  return checkpoint.name || shortId(checkpoint.checkpoint_id);
}
