/**
 * Virtual scrolling arithmetic, and the small formatting helpers the rows use.
 */

import {
  baseName,
  checkpointLabel,
  formatAge,
  formatBytes,
  shortId,
  untranslated
} from '../src/format';
import { isRuntimeEvent, RUNTIME_EVENT_SCHEMA_ID } from '../src/apiTypes';
import { nearEnd, scrollToReveal, scrollToShow, visibleRows } from '../src/tree/window';

describe('visibleRows', () => {
  it('renders the rows in view plus the overscan', () => {
    expect(visibleRows(0, 260, 26, 10_000, 8)).toEqual({ start: 0, end: 19 });
    expect(visibleRows(26 * 5000, 260, 26, 10_000, 8)).toEqual({ start: 4992, end: 5019 });
  });

  it('stops at the end of the list', () => {
    expect(visibleRows(26 * 9995, 260, 26, 10_000, 8)).toEqual({ start: 9987, end: 10_000 });
  });

  it('handles an empty list and odd inputs', () => {
    expect(visibleRows(0, 260, 26, 0)).toEqual({ start: 0, end: 0 });
    expect(visibleRows(-50, 260, 26, 3)).toEqual({ start: 0, end: 3 });
  });
});

describe('scrollToShow', () => {
  it('scrolls up or down just enough, or not at all', () => {
    expect(scrollToShow(2, 0, 260, 26)).toBeNull();
    expect(scrollToShow(20, 0, 260, 26)).toBe(21 * 26 - 260);
    expect(scrollToShow(3, 26 * 10, 260, 26)).toBe(78);
  });
});

describe('nearEnd', () => {
  it('is true within the margin of the last row', () => {
    expect(nearEnd(0, 260, 26, 200, 20)).toBe(false);
    expect(nearEnd(26 * 175, 260, 26, 200, 20)).toBe(true);
  });
});

describe('format', () => {
  it('formats sizes', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(200 * 1024 * 1024)).toBe('200 MiB');
    expect(formatBytes(-1)).toBe('?');
  });

  it('formats ages', () => {
    const now = 1_000_000_000;
    expect(formatAge(now - 2000, now)).toBe('just now');
    expect(formatAge(now - 30_000, now)).toBe('30 s ago');
    expect(formatAge(now - 5 * 60_000, now)).toBe('5 min ago');
    expect(formatAge(now - 3 * 3_600_000, now)).toBe('3 h ago');
    expect(formatAge(now - 72 * 3_600_000, now)).toBe('3 d ago');
    expect(formatAge(now + 5000, now)).toBe('just now');
  });

  it('puts ages through the translation function', () => {
    const german = (template: string, ...args: (string | number)[]): string =>
      ({ '%1 min ago': 'vor %1 Min.' })[template]?.replace('%1', String(args[0])) ?? template;
    expect(formatAge(1_000_000 - 5 * 60_000, 1_000_000, german)).toBe('vor 5 Min.');
    expect(untranslated('%2 of %1', 'a', 'b')).toBe('b of a');
  });

  it('names things', () => {
    expect(shortId('0123456789abcdef')).toBe('01234567');
    expect(baseName('dir/sub/analysis.ipynb')).toBe('analysis.ipynb');
    expect(baseName('top.ipynb')).toBe('top.ipynb');
    expect(checkpointLabel({ name: null, checkpoint_id: 'abcdef0123' })).toBe('abcdef01');
    expect(checkpointLabel({ name: 'before', checkpoint_id: 'abcdef0123' })).toBe('before');
  });
});

describe('isRuntimeEvent', () => {
  it('accepts the server runtime events and nothing else', () => {
    const event = {
      schema_id: RUNTIME_EVENT_SCHEMA_ID,
      action: 'checkpoint',
      runtime_id: 'r',
      checkpoint_id: 'c',
      ok: true,
      duration_ms: 3
    };
    expect(isRuntimeEvent(event)).toBe(true);
    expect(isRuntimeEvent({ ...event, schema_id: 'https://events.jupyter.org/other' })).toBe(false);
    expect(isRuntimeEvent({ ...event, ok: 'yes' })).toBe(false);
    expect(isRuntimeEvent(null)).toBe(false);
  });
});

describe('scrollToReveal (the pinned runtime when another notebook takes focus)', () => {
  it('scrolls up to a box above the view, its top first', () => {
    // The panel was scrolled 400 px down; "this notebook" is pinned on top again.
    expect(scrollToReveal(0, 60, 400, 300)).toBe(0);
  });

  it('leaves a box in view alone', () => {
    expect(scrollToReveal(0, 60, 0, 300)).toBeNull();
    expect(scrollToReveal(100, 60, 50, 300)).toBeNull();
  });

  it('scrolls down to a box below the view, its bottom at the bottom', () => {
    expect(scrollToReveal(500, 60, 0, 300)).toBe(260);
  });

  it('shows the top of a box taller than the view', () => {
    expect(scrollToReveal(500, 400, 0, 300)).toBe(500);
    expect(scrollToReveal(500, 400, 500, 300)).toBeNull();
  });
});
