-- Write the report with the holder's fence, in one statement: the row is
-- written when its fence is not above the holder's, and is left as it is
-- (no row returned) when a holder with a higher fence wrote it since.
INSERT INTO report (id, body, fence) VALUES (:'id', :'body', :'fence'::bigint)
ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, fence = EXCLUDED.fence
  WHERE report.fence <= EXCLUDED.fence
RETURNING fence;
