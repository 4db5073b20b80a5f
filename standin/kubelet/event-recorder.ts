// The kubelet's event recorder: repeated events become one Event whose count and lastTimestamp grow, and many similar
// ones (same object and reason, other messages) one "(combined from similar events)" Event — client-go
// tools/record/events_cache.go (EventAggregator, eventLogger) and event.go (recordToSink: a patch, else a create).
import type { CoreV1Event } from '@kubernetes/client-node';

/** events_cache.go defaults: 10 distinct messages within 10 minutes are combined; each LRU holds 4096 keys. */
const MAX_SIMILAR_EVENTS = 10;
const SIMILAR_WINDOW_MS = 600_000;
const CACHE_ENTRIES = 4096;

export interface EventWrite {
  /** Created when `patch` is undefined; else its count, lastTimestamp and message are patched (created if gone). */
  event: CoreV1Event;
  patch?: { count: number; lastTimestamp: Date; message: string };
}

/** A Map that forgets its oldest key past CACHE_ENTRIES (the LRU caches of events_cache.go). */
function remember<V>(cache: Map<string, V>, key: string, value: V): void {
  cache.delete(key);
  cache.set(key, value);
  if (cache.size > CACHE_ENTRIES) cache.delete(cache.keys().next().value as string);
}

export class EventCorrelator {
  private readonly similar = new Map<string, { messages: Set<string>; last: number }>();
  private readonly seen = new Map<string, { name: string; count: number; firstTimestamp: Date }>();

  /** EventCorrelate: what to write for a new event. */
  correlate(event: CoreV1Event, now = new Date()): EventWrite {
    const o = event.involvedObject;
    const aggregateKey = [
      event.source?.component,
      event.source?.host,
      o.kind,
      o.namespace,
      o.name,
      o.uid,
      o.apiVersion,
      event.type,
      event.reason,
      event.reportingComponent,
      event.reportingInstance,
    ].join('\u0000');
    const eventKey = [aggregateKey, o.fieldPath, event.message].join('\u0000');
    // EventAggregate
    let record = this.similar.get(aggregateKey);
    if (!record || now.getTime() - record.last > SIMILAR_WINDOW_MS) record = { messages: new Set(), last: 0 };
    record.messages.add(event.message ?? '');
    record.last = now.getTime();
    remember(this.similar, aggregateKey, record);
    let key = eventKey;
    if (record.messages.size >= MAX_SIMILAR_EVENTS) {
      record.messages.delete(record.messages.values().next().value as string);
      event = { ...event, message: `(combined from similar events): ${event.message}` };
      key = aggregateKey;
    }
    // eventObserve
    const last = this.seen.get(key);
    if (!last) {
      remember(this.seen, key, { name: event.metadata.name ?? '', count: 1, firstTimestamp: now });
      return { event: { ...event, count: 1, firstTimestamp: now, lastTimestamp: now } };
    }
    const count = last.count + 1;
    remember(this.seen, key, { ...last, count });
    return {
      event: {
        ...event,
        metadata: { ...event.metadata, name: last.name },
        count,
        firstTimestamp: last.firstTimestamp,
        lastTimestamp: now,
      },
      patch: { count, lastTimestamp: now, message: event.message ?? '' },
    };
  }
}
