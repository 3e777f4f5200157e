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

/** A translation function: a template with %1, %2... and its arguments (`trans.__`). */
export type Translate = (template: string, ...args: (string | number)[]) => string;

/** Fills %1, %2... in, untranslated (what `nullTranslator` does). */
export const untranslated: Translate = (template, ...args) =>
  template.replace(/%(\d+)/g, (match, n) => (args[Number(n) - 1] ?? match).toString());

/** How long ago `then` was, at `now` (both ms): "just now", "5 min ago", "3 h ago", ... */
export function formatAge(then: number, now: number, t: Translate = untranslated): string {
  const seconds = Math.max(0, Math.round((now - then) / 1000));
  if (seconds < 10) {
    return t('just now');
  }
  if (seconds < 60) {
    return t('%1 s ago', seconds);
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    return t('%1 min ago', minutes);
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 48) {
    return t('%1 h ago', hours);
  }
  return t('%1 d ago', Math.floor(hours / 24));
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
export function checkpointLabel(checkpoint: {
  name: string | null;
  checkpoint_id: string;
}): string {
  return checkpoint.name || shortId(checkpoint.checkpoint_id);
}

/** The label of a checkpoint a cache may not hold (its short id then). */
export function checkpointLabelIn(
  cache: {
    checkpoint(checkpointId: string): { name: string | null; checkpoint_id: string } | undefined;
  },
  checkpointId: string
): string {
  const known = cache.checkpoint(checkpointId);
  return known ? checkpointLabel(known) : shortId(checkpointId);
}
