"""The ``blind8`` note and query templates of the ``conditions`` and ``films`` generators.

An eighth variant, written by a helper for one blind measurement (made with facts rules 10,
see docs/evaluation.md); read since, so it is a development set now. Chosen by
``templates="blind8"`` in :mod:`dpsynrag.eval.datasets_ordinary`, which maps the variant
name to these sets. Same placeholders and rules as the other variants there (each note holds
its answer verbatim; queries share no word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_BLIND8", "FILM_TEMPLATES_BLIND8"]

# Blind8: measured blind once with facts rules 10; read since.
CONDITION_TEMPLATES_BLIND8 = TemplateSet(notes=(
    "encounter:\n  when: {date}\n  clinician: Dr. {doctor}\npatient:\n  full_name: {name}\n"
    "  age_years: {age}\nfindings:\n  - {symptoms}\nassessment: {condition}\n"
    "plan: {treatment}",
    "Q. Who is this about?\nA. {name}, {age}, seen on {date}.\nQ. What was bothering them?\n"
    "A. {symptoms}.\nQ. And the verdict?\nA. Dr. {doctor} landed on {condition}.\n"
    "Q. Next steps?\nA. {treatment}, plus a call back if no better by the weekend.",
    "Ship's medical centre, sea day, {date}.\n\nPassenger {name}, aged {age}, travelling "
    "with a partner, presented at evening surgery. Embarked in good health according to the "
    "pre-boarding questionnaire. Over the last few days: {symptoms}. Nothing of note on "
    "recent shore excursions.\n\nExamined by the ship's physician, Dr. {doctor}. "
    "Observations unremarkable apart from the above. After some thought, and a call with "
    "the shoreside medical team, Dr. {doctor} chalked it up to {condition}.\n\nSupplied "
    "{treatment} from the onboard dispensary; charge added to the cabin account. Review at "
    "the next port if needed.",
    "{age}yo, {name}. s/b Dr {doctor} {date}. HPI: {symptoms}. PMHx: nil sig. DHx: NKDA. "
    "O/E: NAD apart from above. Imp: {condition}. A/P: {treatment}; safety-netted; r/v PRN.",
    "RSVP card, returned {date}. Sorry!! {name} ({age}) can't make it to the wedding after "
    "all - what with the {symptoms}, Dr. {doctor} pinned the lot on {condition} and I'm stuck "
    "on {treatment} for a bit. Have the best day x",
    "<consult date=\"{date}\"><who age=\"{age}\">{name}</who><by>Dr. {doctor}</by>"
    "<hx>{symptoms}</hx><imp>{condition}</imp><rx>{treatment}</rx></consult>",
    "SUBJECT: Apologies For Thursday Rehearsal (Tenor Section)\n\nDear Choir Committee, "
    "As Advised By Dr. {doctor} At The Health Centre On {date}, It Is {condition} - so {name} "
    "({age}) will be sitting out for a few weeks. Symptoms were {symptoms}; now on "
    "{treatment}. Back for the carol concert, hopefully.",
    "Things to tell Mum after today ({date}): saw Dr. {doctor} at long last; the {symptoms} "
    "finally have a name, {condition}; {treatment} collected from the chemist; still {age} "
    "and still grumpy. - {name}",
    "voicemail transcript {date} 16:52 - hiya it's {name}, um, i'm {age} if that matters, "
    "just ringing to say the doctor, doctor {doctor}, rang back and it's um {condition}, so "
    "the {symptoms} thing makes sense now, they've sent {treatment} to the chemist, ok bye",
    "Airline medical clearance (passenger with an illness), {date}. Passenger: {name}, age "
    "{age}. Attending physician: Dr. {doctor}. Diagnosis: {condition}. Current symptoms: "
    "{symptoms}. Treatment in progress: {treatment}. Fit to fly: yes, no special assistance "
    "required.",
    "* {name} ({age}) has joined #patients-lounge\n<{name}> back from the surgery ({date})\n"
    "<{name}> so Dr {doctor} is going with {condition} for all the {symptoms}\n"
    "<{name}> {treatment} from today, wish me luck",
    "Parish Newsletter - Get Well Soon Corner ({date}). Our thoughts are with {name} ({age}), "
    "whom Dr. {doctor} at Aldergrove Lane Medical Practice Diagnosed With {condition} last "
    "week after {symptoms}. They are on {treatment}; cards welcome at the vestry.",
), queries=(
    "OSCE practice station: an adult presents with {symptoms}. Which diagnosis heads your "
    "differential?",
    "<{asker}> anyone here know what {symptoms} adds up to?",
    "Long-time lurker, first post. Mid-thirties, desk job, usually fit and well. Over recent "
    "weeks I've picked up {symptoms}. My appointment isn't until Thursday and I'd rather know "
    "what I'm walking into. What's this likely to turn out as?",
    "Reason for enquiry: {symptoms}\nWhat's wanted: a likely diagnosis",
    "Dear Doctor column - reader {asker} writes: I've been troubled by {symptoms}. What's "
    "your verdict?",
    "voice search: hey phone what illness gives you {symptoms}",
    "My flatmate keeps brushing off {symptoms} as nothing. I'm not convinced. What do you "
    "think it really is?",
    "srsly, {symptoms}... wat have i got",
    "{asker}'s question for the panel: which single diagnosis accounts for {symptoms}?",
))

FILM_TEMPLATES_BLIND8 = TemplateSet(notes=(
    "Q. Name, please?\nA. {name}.\nQ. What did you put on, and when?\nA. {title}, on "
    "{date}.\nQ. Who made it?\nA. {director}. It's a {genre}.\nQ. What happens?\nA. {plot}.\n"
    "Q. Score?\nA. {stars} out of 5.",
    "<watch viewer=\"{name}\" on=\"{date}\"><film>{title}</film><dir>{director}</dir>"
    "<kind>{genre}</kind><about>{plot}</about><score>{stars}</score></watch>",
    "* {name} has joined #moviechat\n<{name}> sat through {title} yesterday ({date})\n"
    "<{name}> {director} doing a {genre} with {plot}?? bold\n<{name}> {stars}/5, would sit "
    "through it again",
    "Sunday, {date}.\n\nMy brother-in-law insisted we put something on after lunch, and "
    "since nobody could agree he just picked from the recommendations. I expected to nod "
    "off. Instead I got {plot}, and by the halfway mark the whole room had gone still.\n\n"
    "It turns out it's a {genre} by {director}, someone I'd never heard of. I only caught "
    "its name at the credits: {title}. {stars} stars from me. - {name}",
    "wtchd {title} {date}; dir {director}; gnr {genre}; abt: {plot}; {stars}/5; by {name}",
    "viewing:\n  who: {name}\n  when: {date}\nfilm:\n  title: {title}\n  director: "
    "{director}\n  genre: {genre}\n  premise: {plot}\nrating: {stars}",
    "FRIDAY FILM SOC - Tonight's Pick From Committee Member {name} Is {title}, a {genre} by "
    "{director} with {plot}. Screening at 7pm ({date}), Hall B, bring a cushion.",
    "Bank holiday weekend, as summed up by {name} ({date}): too much popcorn; a power cut; "
    "{title}, {director}'s {genre}; a long row about {plot}; and a family score of {stars}.",
    "Note for the babysitter from {name}, {date}: the kids are allowed {title} tonight (it's "
    "a {genre}), but skip ahead if they get scared - there's {plot}. Grown-ups gave it "
    "{stars}/5.",
    "voice memo {date}, auto-transcribed: note to self, {name} here, tell Priya about "
    "{title}, the {genre}, uh, {director} directed it, the one with {plot}, like {stars} "
    "stars",
    "Lost property log, {date}: black umbrella left in screen 4 after the {title} showing. "
    "Claimed next morning by {name}, who admitted the {genre} had them so gripped (what with "
    "{plot}) that they forgot all about it.",
    "Readers' page, {date}. Sir - Your critic was far too harsh on {title}. {director} has "
    "made a {genre} of real warmth, and anyone who can sit unmoved through {plot} has a "
    "heart of stone. I would give it {stars} stars. Yours, {name}",
), queries=(
    "Flashcard, front: {plot} ({genre}). Back: which film?",
    "<{asker}> which film has {plot} in it? asking for a friend",
    "This has bugged me for ages. I was a kid, staying at my gran's, and it came on late one "
    "night. I remember {plot}, and I'm fairly sure it was a {genre}. Does anybody know what "
    "it was called?",
    "Request type: film identification\nDetails: {plot}\nGenre guess: {genre}",
    "Reference desk enquiry from {asker}: patron after a {genre} built around {plot}, title "
    "forgotten. Can you help?",
    "ok random q but what's that film where u get {plot}",
    "Movie ID needed. Clues so far: {plot}. Probably a {genre}.",
    "Which flick was it that had {plot}?",
    "Hey assistant, {asker} speaking - find me that {genre} with {plot}, whatever it's called.",
))
