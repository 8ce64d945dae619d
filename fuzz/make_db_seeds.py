#!/usr/bin/env python3
"""Writes the db_open_file seeds that need SQLite itself: a database whose rows were changed behind
the library's back (checksum no longer matches), one that says it has schema version 2, another
application's database, an empty file and a text file. Run after make_fuzz_seeds (it starts from
corpus/db_open_file/good.db):  python3 fuzz/make_db_seeds.py fuzz/corpus"""
import os
import shutil
import sqlite3
import sys
import tempfile


def edited_copy(good, target, statements):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "seed.db")
        shutil.copy(good, path)
        c = sqlite3.connect(path)
        for s in statements:
            c.execute(s)
        c.commit()
        c.execute("PRAGMA journal_mode=DELETE")  # fold the WAL back into the one file
        c.close()
        shutil.copy(path, target)


def main():
    folder = os.path.join(sys.argv[1], "db_open_file")
    good = os.path.join(folder, "good.db")
    edited_copy(good, os.path.join(folder, "bad_rows.db"), [
        "UPDATE records SET record_json = replace(record_json, '\"notes\":1', '\"notes\":3') "
        "WHERE rowid = (SELECT min(rowid) FROM records)",
        "UPDATE records SET tuned_at = 5 WHERE rowid = (SELECT max(rowid) FROM records)"])
    edited_copy(good, os.path.join(folder, "schema_version_2.db"),
                ["UPDATE meta SET value = '2' WHERE name = 'schema_version'"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "seed.db")
        c = sqlite3.connect(path)
        c.execute("PRAGMA page_size=512")
        c.execute("CREATE TABLE records(id INTEGER PRIMARY KEY, name TEXT)")
        c.execute("INSERT INTO records(name) VALUES ('not a tuning record')")
        c.commit()
        c.close()
        shutil.copy(path, os.path.join(folder, "foreign_app.db"))
    open(os.path.join(folder, "empty.db"), "wb").close()
    with open(os.path.join(folder, "text_file.db"), "w") as f:
        f.write("this is not a database\n")


if __name__ == "__main__":
    main()
