/**
 * Which answer is the newest, when answers come back in any order.
 *
 * Every request the panel sends takes a ticket, in the order they are sent. Before its
 * answer is applied to one piece of state (a runtime's record, its lineage, a checkpoint),
 * `accept` checks that no answer to a later request has been applied to that piece: the
 * server answers each request with its state at that moment, so the later request's answer
 * is at least as new, and an older one arriving after it is dropped.
 */
export class Freshness {
  /** A ticket for a request sent now. */
  ticket(): number {
    this._issued += 1;
    return this._issued;
  }

  /**
   * Whether the answer to the request of `ticket` may be applied to `key` (then it counts
   * as applied): false when an answer to a later request already was.
   */
  accept(key: string, ticket: number): boolean {
    const applied = this._applied.get(key);
    if (applied !== undefined && applied > ticket) {
      return false;
    }
    this._applied.set(key, ticket);
    return true;
  }

  private _issued = 0;
  private _applied = new Map<string, number>();
}
