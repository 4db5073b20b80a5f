// The scrolling list of connections, HTTP requests and gRPC calls (time, method, path, status, duration, bytes, where
// it went; a gRPC call shows "gRPC", Service/Method and its grpc-status) and, under --shadow, of the local command's
// writes with what each would change.
import { Box, Text } from 'ink';
import type { TrafficRow } from '../state.js';
import { formatBytes, formatDuration, isGrpcServerFault } from '../lines.js';

function clock(time: number): string {
  const date = new Date(time);
  return [date.getHours(), date.getMinutes(), date.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

function padTo(text: string, width: number): string {
  return text.length > width ? `${text.slice(0, width - 1)}…` : text.padEnd(width);
}

function statusColor(row: TrafficRow): string | undefined {
  if (row.grpc && row.done) {
    if (row.grpcStatus === undefined) return 'yellow';
    if (row.grpcStatus === 0) return 'green';
    return isGrpcServerFault(row.grpcStatus) ? 'red' : 'yellow';
  }
  if (!row.done || row.status === undefined) return undefined;
  if (row.status >= 500) return 'red';
  if (row.status >= 400) return 'yellow';
  return 'green';
}

/** Changes on a write's diff line; `d` shows them all. */
const DIFF_LINE_CHANGES = 3;

/** A write of a shadowed command: verb, object, HTTP status, dry-run / in memory / refused; its changes below. */
function WriteLine({ row, pathWidth }: { row: TrafficRow; pathWidth: number }) {
  const write = row.write!;
  const color = write.result === 'refused' ? 'yellow' : write.result === 'in memory' ? 'cyan' : 'magenta';
  const status = String(row.status ?? '').padStart(6);
  return (
    <Box flexDirection="column">
      <Text wrap="truncate">
        <Text dimColor>{clock(row.time)}</Text> write {padTo(write.verb.toUpperCase(), 7)}{' '}
        {padTo(write.object, pathWidth)} <Text color={statusColor(row)}>{status}</Text>{' '}
        <Text color={color}>{write.result}</Text>
      </Text>
      {write.changes.length > 0 ? (
        <Text wrap="truncate" dimColor>
          {'         ± '}
          {write.changes.slice(0, DIFF_LINE_CHANGES).join('; ')}
          {write.changes.length > DIFF_LINE_CHANGES ? `; … ${write.changes.length - DIFF_LINE_CHANGES} more (d)` : ''}
        </Text>
      ) : null}
    </Box>
  );
}

/** Lines a row takes: a write with changes has its diff line under it. */
function rowHeight(row: TrafficRow): number {
  return row.write && row.write.changes.length > 0 ? 2 : 1;
}

/** An HTTP status; for a gRPC call OK, its grpc-status number, or "reset" when its stream ended without one. */
function httpStatus(row: TrafficRow): string {
  if (row.mirror) return 'mirror';
  if (!row.done) return '…';
  if (row.grpc) return row.grpcStatus === undefined ? 'reset' : row.grpcStatus === 0 ? 'OK' : String(row.grpcStatus);
  return row.status === undefined ? '…' : String(row.status);
}

export function TrafficLine({ row, pathWidth }: { row: TrafficRow; pathWidth: number }) {
  if (row.kind === 'write' && row.write) return <WriteLine row={row} pathWidth={pathWidth} />;
  const what =
    row.kind === 'http'
      ? `${padTo(row.method ?? '', 7)} ${padTo(row.path ?? '', pathWidth)}`
      : `${padTo('TCP', 7)} ${padTo(row.remote ?? '', pathWidth)}`;
  const status = row.kind === 'http' ? httpStatus(row) : row.done ? 'closed' : 'open';
  const duration = row.ms === undefined ? '' : formatDuration(row.ms);
  const bytes =
    row.kind === 'http'
      ? row.bytesOut === undefined
        ? ''
        : formatBytes(row.bytesOut)
      : row.done
        ? `${formatBytes(row.bytesIn ?? 0)}/${formatBytes(row.bytesOut ?? 0)}`
        : '';
  const fellBack = row.fallbackMs === undefined ? '' : ` (fallback ${formatDuration(row.fallbackMs)})`;
  const pod = `→ pod${row.pod ? ` ${row.pod}` : ''}`;
  const to = row.mirror
    ? row.to === 'local'
      ? `${pod}, copy → local`
      : `${pod} (no match)`
    : row.to === 'local'
      ? '→ local'
      : `${pod}${fellBack}`;
  return (
    <Text wrap="truncate">
      <Text dimColor>{clock(row.time)}</Text> :{String(row.port).padEnd(5)} {what}{' '}
      <Text color={statusColor(row)}>{status.padStart(6)}</Text> {duration.padStart(8)} {bytes.padStart(10)}{' '}
      <Text
        color={row.to === 'local' ? 'magenta' : row.fallbackMs !== undefined ? 'yellow' : undefined}
        dimColor={row.to === 'pod' && row.fallbackMs === undefined}
      >
        {to}
      </Text>
    </Text>
  );
}

/** Shows the newest `height` rows; older rows stay in the store (capped) until `c` clears them. */
export function TrafficList({ rows, height, width }: { rows: TrafficRow[]; height: number; width: number }) {
  const visible: TrafficRow[] = [];
  let lines = 0;
  for (let i = rows.length - 1; i >= 0; i -= 1) {
    lines += rowHeight(rows[i]);
    if (lines > Math.max(1, height) && visible.length > 0) break;
    visible.unshift(rows[i]);
  }
  // Time, port, method, status, duration and bytes take 51 columns and "→ pod <name>" about 15: the path gets the rest.
  const pathWidth = Math.max(12, Math.min(60, width - 66));
  return (
    <Box flexDirection="column">
      {visible.length === 0 ? (
        <Text dimColor>
          {' '}
          no traffic yet: requests to the pod's ports (with --shadow, the command's writes) appear here
        </Text>
      ) : null}
      {visible.map((row) => (
        <TrafficLine key={row.key} row={row} pathWidth={pathWidth} />
      ))}
    </Box>
  );
}
