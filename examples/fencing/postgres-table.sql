-- The table a fenced job writes: each row keeps the fence of its last writer.
CREATE TABLE report (
  id    text PRIMARY KEY,
  body  text NOT NULL,
  fence bigint NOT NULL
);
